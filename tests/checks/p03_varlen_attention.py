"""Checks for p03.varlen_attention. References: a per-sequence loop of float64 softmax attention on the CPU with an
explicit bottom-right causal mask (`arange(S_k) <= arange(S_q) + S_k - S_q`) and K/V heads repeated for GQA, and
`F.scaled_dot_product_attention` in float64 with `torch.nn.attention.bias.causal_lower_right` (an independent spelling
of the same mask); the tolerance baseline is SDPA per sequence in the dtype under test. Guard elements around a
strided output window catch stores past the last sequence. `pack_sequences` against `itertools.accumulate`."""

import itertools
import math

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from llm_algo.bench import flops_row, sdpa_backend_name
from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_exact_int,
    expect_refused,
    expect_refused_or_correct,
    expect_tensor,
)
from llm_algo.check.restrictions import ATTENTION, LOGSUMEXP, SOFTMAX
from llm_algo.device import triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded
from llm_algo.references.layouts import (
    INT32_WRAP_STRIDE,
    UNIT_LAST_STRIDE,
    describe_layouts,
    distinct_layouts,
    views_past_int32,
)

checks = Checks("p03.varlen_attention", triton=True)
checks.restrict(
    "varlen_attention",
    kernel=True,
    forbid=[*ATTENTION, *LOGSUMEXP, *SOFTMAX],
    instead="compute the attention in your @triton.jit kernel (SDPA is the checks' reference)",
)
HINT_MASK = "causal is bottom-right aligned: row i of a sequence sees keys j <= i + (S_k - S_q)"
HINT_STARTS = "read q_start from cu_seqlens_q and k_start from cu_seqlens_k; rows and keys are start + index"


def sixteen_bit():
    return [dtype for dtype in triton_dtypes() if dtype != torch.float32]


def loop_reference(q, k, v, lens_q, lens_k, causal, dtype=torch.float64):
    """Per sequence, on the CPU: softmax(q k^T / sqrt(d) + bottom-right mask) v, K/V heads repeated."""
    outs, cq, ck = [], 0, 0
    group = q.shape[1] // k.shape[1]
    for s_q, s_k in zip(lens_q, lens_k, strict=True):
        qs = q[cq : cq + s_q].cpu().to(dtype).transpose(0, 1)  # (H, S_q, d)
        ks = k[ck : ck + s_k].cpu().to(dtype).transpose(0, 1).repeat_interleave(group, 0)
        vs = v[ck : ck + s_k].cpu().to(dtype).transpose(0, 1).repeat_interleave(group, 0)
        scores = qs @ ks.transpose(1, 2) / math.sqrt(q.shape[-1])
        if causal:
            visible = torch.arange(s_k)[None, :] <= torch.arange(s_q)[:, None] + (s_k - s_q)
            scores = scores.masked_fill(~visible, float("-inf"))
        outs.append((torch.softmax(scores, dim=-1) @ vs).transpose(0, 1))
        cq, ck = cq + s_q, ck + s_k
    return torch.cat(outs, dim=0)


def sdpa_per_sequence(q, k, v, lens_q, lens_k, causal, dtype=None):
    """SDPA per sequence, with causal_lower_right for the bottom-right mask; in `dtype` (None: the inputs')."""
    outs, cq, ck = [], 0, 0
    for s_q, s_k in zip(lens_q, lens_k, strict=True):
        group = q.shape[1] // k.shape[1]
        ks, vs = (t[ck : ck + s_k].repeat_interleave(group, dim=1) for t in (k, v))  # GQA: heads repeated
        qs, ks, vs = (t.transpose(0, 1)[None] for t in (q[cq : cq + s_q], ks, vs))
        if dtype is not None:
            qs, ks, vs = (t.cpu().to(dtype) for t in (qs, ks, vs))
        if s_q == 0:
            outs.append(qs[0].transpose(0, 1))
        else:
            mask = causal_lower_right(s_q, s_k) if causal else None
            out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
            outs.append(out[0].transpose(0, 1))
        cq, ck = cq + s_q, ck + s_k
    return torch.cat(outs, dim=0)


def packed_problem(lens_q, lens_k, heads, kv_heads, head_dim, dtype, strided_v=False):
    """Packed q, k, v and their cu_seqlens; strided_v: v is a window of a wider buffer (its token and head strides
    differ from k's)."""
    device = triton_device()
    q = torch.randn(sum(lens_q), heads, head_dim, device=device).to(dtype)
    k = torch.randn(sum(lens_k), kv_heads, head_dim, device=device).to(dtype)
    v = torch.randn(sum(lens_k), kv_heads, head_dim + (16 if strided_v else 0), device=device).to(dtype)
    v = v[:, :, :head_dim]
    return q, k, v, cu_seqlens(lens_q), cu_seqlens(lens_k)


def cu_seqlens(lengths):
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=triton_device())


def expect_varlen(ex, lens_q, lens_k, heads, kv_heads, head_dim, dtype, causal, strided_v=False):
    q, k, v, cu_q, cu_k = packed_problem(lens_q, lens_k, heads, kv_heads, head_dim, dtype, strided_v)
    label = (
        describe(q=q, k=k)
        + (f", v strides {v.stride()}" if strided_v else "")
        + f", S_q per sequence {lens_q}, S_k {lens_k}, causal={causal}"
        + (f", GQA {heads}/{kv_heads}" if heads != kv_heads else "")
    )
    out = ex.varlen_attention(q, k, v, cu_q, cu_k, causal=causal)
    expect_tensor(out, shape=tuple(q.shape), dtype=q.dtype, device=q.device.type, input=label, what="out")
    expect_close(
        out,
        loop_reference(q, k, v, lens_q, lens_k, causal),
        baseline=sdpa_per_sequence(q, k, v, lens_q, lens_k, causal),
        input=label,
        what="out",
        hint=f"{HINT_STARTS}; {HINT_MASK}; mask rows >= S_q and keys >= S_k",
    )
    return q, k, v, lens_q, lens_k, out


# ------------------------------------------------------------------------------------------ varlen_attention


@checks("varlen_attention", gate=True)
def kernel_stays_inside_its_sequences(ex):
    """launches varlen_attention_kernel on an output window (head stride padded, 16x16 blocks), causal, lengths
    [7, 0, 21, 1] with a prefill chunk: guards around the output survive and the values are right"""
    lens_q, lens_k = [7, 0, 21, 1], [7, 3, 30, 18]
    heads, kv_heads, head_dim = 2, 1, 16
    q, k, v, cu_q, cu_k = packed_problem(lens_q, lens_k, heads, kv_heads, head_dim, torch.float16)
    buffer, out = guarded((sum(lens_q), heads, head_dim), (3, 1, 0), device=triton_device(), dtype=torch.float16)
    scale = 1.0 / math.sqrt(head_dim) * math.log2(math.e)
    ex.varlen_attention_kernel[(2, len(lens_q) * heads)](
        q,
        k,
        v,
        out,
        cu_q,
        cu_k,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        heads,
        kv_heads,
        scale,
        HEAD_DIM=head_dim,
        BLOCK_M=16,
        BLOCK_N=16,
        IS_CAUSAL=True,
    )
    label = f"out = a ({sum(lens_q)}, {heads}, {head_dim}) window, strides {out.stride()}; S_q {lens_q}, S_k {lens_k}"
    expect_guard_untouched(
        buffer,
        tuple(out.shape),
        input=label,
        hint="mask the store with row < seq_len_q: a tile must not write the next sequence's rows",
    )
    expect_close(
        out,
        loop_reference(q, k, v, lens_q, lens_k, True),
        baseline=sdpa_per_sequence(q, k, v, lens_q, lens_k, True),
        input=label,
        what="out",
        hint=f"{HINT_STARTS}; {HINT_MASK}",
    )


@checks("varlen_attention")
def each_operand_in_its_own_layout(ex):
    """q a slice of a fused QKV, k with padded rows, v a window of a bigger buffer (every operand its own strides, head
    dim contiguous), causal with a prefill chunk, GQA 4/2; then cu_seqlens_q and cu_seqlens_k as strided views:
    refused or right"""
    lens_q, lens_k = [5, 17, 1], [9, 17, 20]
    q, k, v, cu_q, cu_k = packed_problem(lens_q, lens_k, 4, 2, 16, torch.float16)
    want = loop_reference(q, k, v, lens_q, lens_k, True)
    baseline = sdpa_per_sequence(q, k, v, lens_q, lens_k, True)
    lq, lk, lv = distinct_layouts(q, k, v, order=UNIT_LAST_STRIDE)
    label = describe_layouts(q=lq, k=lk, v=lv) + f", S_q {lens_q}, S_k {lens_k}, causal"
    out = ex.varlen_attention(lq, lk, lv, cu_q, cu_k, causal=True)
    expect_tensor(out, shape=tuple(q.shape), dtype=q.dtype, device=q.device.type, input=label, what="out")
    hint = "address q, k and v each through its own token and head strides (q is a slice of a fused QKV here)"
    expect_close(out, want, baseline=baseline, input=label, what="out", hint=hint)
    strided_q, strided_k = distinct_layouts(cu_q, cu_k)
    label = f"cu_seqlens_q and cu_seqlens_k as views with strides {strided_q.stride()} and {strided_k.stride()}"
    expect_refused_or_correct(
        lambda: ex.varlen_attention(q, k, v, strided_q, strided_k, causal=True),
        lambda out: expect_close(out, want, baseline=baseline, input=label + " (accepted, so it must be right)"),
        input=label,
        hint="the kernel reads cu_seqlens at ptr + b: pass .contiguous() copies, or refuse strided ones with a "
        "ValueError",
    )


@checks("varlen_attention")
def equal_lengths_match_causal_attention(ex):
    """S_q = S_k per sequence: lengths 1, 16, 37, 5 (not multiples of the tile), causal and not, GQA 4/2, d 16 and 32,
    v with other strides than k"""
    for dtype in sixteen_bit():
        for causal in (False, True):
            expect_varlen(ex, [1, 16, 37, 5], [1, 16, 37, 5], 4, 2, 32 if causal else 16, dtype, causal, causal)


@checks("varlen_attention")
def chunked_prefill_is_bottom_right(ex):
    """S_q < S_k per sequence (a prefill chunk, a decode step S_q = 1, an equal pair): causal bottom-right; and
    non-causal S_q > S_k at d 64"""
    for dtype in sixteen_bit():
        expect_varlen(ex, [19, 1, 8, 33], [40, 23, 8, 50], 2, 2, 16, dtype, causal=True)
        expect_varlen(ex, [6, 17], [30, 3], 4, 1, 64, dtype, causal=False)  # non-causal: S_q > S_k is fine


@checks("varlen_attention")
def empty_and_single_token_sequences(ex):
    """empty sequences (S_q = S_k = 0, and S_q = 0 with keys) between others, a batch of one single token at d 128"""
    for causal in (True, False):
        expect_varlen(ex, [0, 3, 0, 18, 0], [0, 3, 5, 18, 0], 2, 1, 16, torch.float16, causal)
    expect_varlen(ex, [1], [1], 1, 1, 128, torch.float16, causal=True)


@checks("varlen_attention")
def sequences_do_not_see_each_other(ex):
    """changing the keys and values of one sequence changes only that sequence's rows"""
    lens = [9, 20, 4]
    q, k, v, cu_q, cu_k = packed_problem(lens, lens, 2, 2, 16, torch.float16)
    first = ex.varlen_attention(q, k, v, cu_q, cu_k, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[9:29] = torch.randn_like(k2[9:29])
    v2[9:29] = torch.randn_like(v2[9:29])
    second = ex.varlen_attention(q, k2, v2, cu_q, cu_k, causal=True)
    label = describe(q=q) + f", lengths {lens}; keys and values of sequence 1 (tokens 9..28) replaced"
    changed = (first != second).flatten(1).any(dim=1)
    rows = [i for i in range(sum(lens)) if bool(changed[i]) != (9 <= i < 29)]
    expect(
        not rows,
        "a sequence's output depends on another sequence's keys (or not on its own)",
        input=label,
        expected="rows 9..28 change, every other row is identical",
        got=f"rows {rows[:8]} behave otherwise",
        hint=HINT_STARTS,
    )


@checks("varlen_attention", requires_compiled=True)
def offsets_past_2_31_elements(ex):
    """q of 3 packed tokens x 3 heads x d 64 in two views whose token, then head stride is 2**30 + 4096 elements
    (4.3 GB of fp16 each, one at a time): index 2 starts past 2**31 elements, where an int32 (q_start + row) *
    stride_qt or head * stride_qh wraps; S_q [1, 1, 1], S_k [5, 7, 9], causal, GQA 3:1"""
    lens_q, lens_k = [1, 1, 1], [5, 7, 9]
    q, k, v, cu_q, cu_k = packed_problem(lens_q, lens_k, 3, 1, 64, torch.float16)
    want = loop_reference(q, k, v, lens_q, lens_k, True)
    baseline = sdpa_per_sequence(q, k, v, lens_q, lens_k, True)
    for name, huge_q in views_past_int32(q, {0: "token", 1: "head"}):
        label = describe_layouts(q=huge_q, k=k, v=v) + f" ({name} 2 of q at element {2 * INT32_WRAP_STRIDE}), causal"
        out = ex.varlen_attention(huge_q, k, v, cu_q, cu_k, causal=True)
        hint = f"compute the {name} offset in int64 (cast the index or the stride before the product)"
        expect_close(out, want, baseline=baseline, input=label, what="out", hint=hint)


@checks("varlen_attention", requires_compiled=True)
def long_packed_batch_on_the_gpu(ex):
    """bf16, d 128, 32/8 heads, lengths up to 2000 with prefill chunks: vs SDPA per sequence in float64"""
    lens_q, lens_k = [1000, 1, 2000, 333, 64], [1000, 700, 2000, 1500, 64]
    dtype = torch.bfloat16 if torch.bfloat16 in triton_dtypes() else torch.float16
    q, k, v, cu_q, cu_k = packed_problem(lens_q, lens_k, 32, 8, 128, dtype)
    label = describe(q=q, k=k) + f", S_q {lens_q}, S_k {lens_k}, causal"
    out = ex.varlen_attention(q, k, v, cu_q, cu_k, causal=True)
    want = sdpa_per_sequence(q.cuda().double(), k.cuda().double(), v.cuda().double(), lens_q, lens_k, True)
    expect_close(
        out,
        want,
        baseline=sdpa_per_sequence(q, k, v, lens_q, lens_k, True),
        input=label,
        what="out",
        hint=f"{HINT_STARTS}; {HINT_MASK}",
    )


@checks("varlen_attention")
def rejects_bad_inputs(ex):
    """bad cu_seqlens (int64, not from 0, decreasing, wrong end, different B), S_q > S_k causal, keys missing,
    a head count that does not divide; fp32 and d = 80 may be refused or computed correctly"""
    lens = [3, 5]
    q, k, v, cu_q, cu_k = packed_problem(lens, lens, 4, 2, 16, torch.float16)
    device = triton_device()
    t = lambda *xs: torch.tensor(xs, dtype=torch.int32, device=device)  # noqa: E731
    call = ex.varlen_attention
    cases = [
        ("cu_seqlens int64", lambda: call(q, k, v, cu_q.long(), cu_k.long())),
        ("cu_seqlens_q [1, 3, 8]", lambda: call(q, k, v, t(1, 3, 8), cu_k)),
        ("cu_seqlens_q [0, 5, 3, 8]", lambda: call(q, k, v, t(0, 5, 3, 8), t(0, 3, 3, 8))),
        ("cu_seqlens_q [0, 3, 9] for 8 tokens", lambda: call(q, k, v, t(0, 3, 9), cu_k)),
        ("cu_seqlens_q for 2 sequences, cu_seqlens_k for 3", lambda: call(q, k, v, cu_q, t(0, 3, 5, 8))),
        ("causal with S_q = 5 > S_k = 2", lambda: call(q, k, v, cu_q, t(0, 6, 8), causal=True)),
        ("a sequence with 3 queries and no key", lambda: call(q, k, v, cu_q, t(0, 0, 8))),
        ("a sequence with 1 query and no key", lambda: call(q, k, v, t(0, 1, 8), t(0, 0, 8))),
        ("k (8, 2, 16), v (8, 1, 16)", lambda: call(q, k, v[:, :1].contiguous(), cu_q, cu_k)),
        (
            "q with head-dim stride 2",
            lambda: call(torch.randn(8, 4, 32, device=device).half()[..., ::2], k, v, cu_q, cu_k),
        ),
        (
            "q (8, 4, 16), k (8, 3, 16): 4 heads, 3 KV heads",
            lambda: call(q, k[:, :1].expand(8, 3, 16).contiguous(), v[:, :1].expand(8, 3, 16).contiguous(), cu_q, cu_k),
        ),
        ("q 2-D", lambda: call(q[:, 0], k, v, cu_q, cu_k)),
    ]
    for label, bad in cases:
        expect_refused(
            bad,
            input=label,
            hint="validate cu_seqlens (int32, from 0, non-decreasing, ending at the "
            "token count, same B) and the per-sequence lengths before launching",
            errors=(ValueError,),
        )
    for label, args in (
        ("fp32 q, k, v", [x.float() for x in (q, k, v)]),
        (
            "d = 80",
            [
                torch.randn(8, 4, 80, device=device).half(),
                torch.randn(8, 2, 80, device=device).half(),
                torch.randn(8, 2, 80, device=device).half(),
            ],
        ),
    ):

        def check_result(out, args=args, label=label):
            expect_close(
                out,
                loop_reference(*args, lens, lens, True),
                baseline=sdpa_per_sequence(*[a.half() for a in args], lens, lens, True),
                input=label,
                what="out",
                hint="supporting it is fine, but then it must be right",
            )

        expect_refused_or_correct(
            lambda args=args: call(*args, cu_q, cu_k, causal=True),
            check_result,
            input=label,
            hint="refuse what the kernel does not support with a ValueError",
        )


# ------------------------------------------------------------------------------------------ pack_sequences


@checks("pack_sequences")
def packs_and_counts(ex):
    """lengths [3, 0, 7, 1]: the packed tensor, int32 cu_seqlens [0, 3, 3, 10, 11] and max_seqlen 7"""
    lens = [3, 0, 7, 1]
    seqs = [torch.randn(n, 2, 4) for n in lens]
    packed, cu, max_len = ex.pack_sequences(seqs)
    label = f"sequences of lengths {lens}, each (L, 2, 4) float32"
    expect_tensor(packed, shape=(11, 2, 4), dtype=torch.float32, input=label, what="packed")
    expect_close(
        packed,
        torch.cat([s.double() for s in seqs]),
        input=label,
        what="packed",
        hint="concatenate along the token dimension, in order",
    )
    expect_tensor(
        cu, shape=(5,), dtype=torch.int32, input=label, what="cu_seqlens", hint="int32, B + 1 entries, starting at 0"
    )
    want = [0, *itertools.accumulate(lens)]
    expect(
        cu.tolist() == want,
        "wrong cu_seqlens",
        input=label,
        expected=str(want),
        got=str(cu.tolist()),
        hint="cu_seqlens[b + 1] = L_0 + ... + L_b",
    )
    expect_exact_int(max_len, 7, input=label, hint="the longest length, a Python int", what="max_seqlen")


@checks("pack_sequences")
def unpack_inverts_pack(ex):
    """unpack_sequences(pack_sequences(seqs)) gives back every sequence, empty ones included"""
    lens = [0, 5, 2, 0, 9]
    seqs = [torch.randn(n, 3, 2, dtype=torch.float16) for n in lens]
    packed, cu, _ = ex.pack_sequences(seqs)
    back = ex.unpack_sequences(packed, cu)
    label = f"lengths {lens}"
    expect(
        len(back) == len(seqs),
        "wrong number of sequences",
        input=label,
        expected=str(len(seqs)),
        got=str(len(back)),
        hint="one slice per consecutive pair of cu_seqlens",
    )
    for b, (got, want) in enumerate(zip(back, seqs, strict=True)):
        expect(
            got.shape == want.shape and bool((got == want).all()),
            f"sequence {b} differs after the round trip",
            input=label,
            expected=str(tuple(want.shape)),
            got=str(tuple(got.shape)),
            hint="packed[cu_seqlens[b]:cu_seqlens[b + 1]]",
        )


@checks("pack_sequences")
def rejects_what_cannot_be_packed(ex):
    """an empty list, mismatched heads or head_dim, mixed dtypes, a 2-D tensor"""
    a = torch.randn(3, 2, 4)
    cases = [
        ("[]", lambda: ex.pack_sequences([])),
        ("(3, 2, 4) and (5, 3, 4)", lambda: ex.pack_sequences([a, torch.randn(5, 3, 4)])),
        ("(3, 2, 4) and (5, 2, 8)", lambda: ex.pack_sequences([a, torch.randn(5, 2, 8)])),
        ("float32 and float16", lambda: ex.pack_sequences([a, torch.randn(5, 2, 4).half()])),
        ("(3, 2, 4) and (6, 8)", lambda: ex.pack_sequences([a, torch.randn(6, 8)])),
    ]
    for label, bad in cases:
        expect_refused(
            bad,
            input=label,
            hint="check each tensor's (H, d), dtype and dimension against the first's",
            errors=(ValueError,),
        )


# ------------------------------------------------------------------------------------------ benchmark


def benchmark(ex):
    """16 causal sequences of 256..4096 tokens, 32/8 heads, d 128, bf16: packed kernel vs an SDPA loop and padded
    SDPA (PyTorch's default backend for both), TFLOP/s over the real (unpadded) causal work."""
    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(256, 4097, (16,), generator=gen).tolist()
    heads, kv_heads, head_dim = 32, 8, 128
    q = torch.randn(sum(lens), heads, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(sum(lens), kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device="cuda")
    flops = sum(2 * 2 * heads * head_dim * n * n // 2 for n in lens)
    shape = f"16 seqs {min(lens)}..{max(lens)} (total {sum(lens)}), H 32/8, d 128 bf16 causal"
    starts = [0, *itertools.accumulate(lens)]
    group = heads // kv_heads  # K/V heads repeated outside the timing (as Hugging Face's SDPA path does), so that
    k_rep, v_rep = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # SDPA picks freely
    per_seq = [
        (q[a:b].transpose(0, 1)[None], k_rep[a:b].transpose(0, 1)[None], v_rep[a:b].transpose(0, 1)[None])
        for a, b in zip(starts, starts[1:], strict=False)
    ]

    def sdpa_loop():
        return [F.scaled_dot_product_attention(qs, ks, vs, is_causal=True) for qs, ks, vs in per_seq]

    longest = max(lens)
    padded = [torch.zeros(len(lens), heads, longest, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    for b, (a, e) in enumerate(zip(starts, starts[1:], strict=False)):
        for buf, src in zip(padded, (q, k_rep, v_rep), strict=True):
            buf[b, :, : e - a] = src[a:e].transpose(0, 1)

    def sdpa_padded():
        return F.scaled_dot_product_attention(*padded, is_causal=True)

    loop_backend = sdpa_backend_name(*per_seq[0], causal=True)
    padded_backend = sdpa_backend_name(*padded, causal=True)
    return [
        flops_row("varlen_attention (yours, packed)", shape, lambda: ex.varlen_attention(q, k, v, cu, cu, True), flops),
        flops_row(f"SDPA per sequence, default backend ({loop_backend})", shape, sdpa_loop, flops),
        flops_row(f"SDPA padded to the longest, default backend ({padded_backend})", shape, sdpa_padded, flops),
    ]
