"""Checks for p03.rope. References: Hugging Face `apply_rotary_pos_emb` (transformers.models.llama.modeling_llama,
nothing downloaded) in float64 with tables from the closed form cos/sin(m * base^(-2i/D)) (oracle) and in the dtype
under test (baseline), float64 autograd through it, a hand-checkable rotation by one radian, and random guard elements
around every head of q and k (and v of a fused QKV buffer) that the in-place kernel must leave alone."""

import math

import torch

from llm_algo.bench import bandwidth_row, baseline_rows, copy_row
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_refused_or_correct
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.hf import transformers_module
from llm_algo.references.kernels import expect_guard_untouched
from llm_algo.references.layouts import UNIT_LAST_STRIDE, describe_layouts, distinct_layouts, with_layout

checks = Checks("p03.rope", triton=True)
checks.in_place("rope", "q", "k")  # rope_ rotates q and k where they are
checks.restrict(
    "rope",
    "rotary_embedding",
    kernel=True,
    forbid=["transformers"],
    instead="rotate the pairs in your @triton.jit kernel (Hugging Face's apply_rotary_pos_emb is the reference)",
)

HINT_ROTATE_HALF = "rotate-half pairs i with i + D/2: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin"
HINT_POSITION = "the position of token (b, s) is offsets[b] + s; load cos/sin row at that position"


def exact_tables(num_positions: int, head_dim: int, base: float = 10000.0):
    """cos, sin of m * theta_i in float64, each (num_positions, head_dim / 2)."""
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * theta
    return angles.cos(), angles.sin()


def hf_apply(q, k, cos_half, sin_half, offsets, dtype=torch.float64, inverse=False):
    """Hugging Face's apply_rotary_pos_emb on (B, S, H, D) tensors (unsqueeze_dim=2), computed in `dtype` on the CPU
    from float64 half tables: duplicated to (P, D) as LlamaRotaryEmbedding does, gathered at offsets[b] + s."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    transformers_module()  # imports transformers quietly
    seq_len = q.shape[1]
    positions = offsets.cpu().long()[:, None] + torch.arange(seq_len)  # (B, S)
    cos = torch.cat((cos_half, cos_half), dim=-1)[positions].to(dtype)  # (B, S, D)
    sin = torch.cat((sin_half, sin_half), dim=-1)[positions].to(dtype)
    with torch.no_grad():
        return apply_rotary_pos_emb(
            q.cpu().to(dtype), k.cpu().to(dtype), cos, -sin if inverse else sin, unsqueeze_dim=2
        )


def random_case(batch, seq_len, q_heads, kv_heads, head_dim, dtype, max_offset=20):
    q = torch.randn(batch, seq_len, q_heads, head_dim, device=triton_device()).to(dtype)
    k = torch.randn(batch, seq_len, kv_heads, head_dim, device=triton_device()).to(dtype)
    offsets = torch.randint(0, max_offset, (batch,), dtype=torch.int32, device=triton_device())
    cos, sin = exact_tables(max_offset + seq_len, head_dim)
    return q, k, offsets, cos, sin


def expect_rotated(q_got, k_got, q, k, cos, sin, offsets, label, inverse=False, hint=HINT_ROTATE_HALF):
    q_want, k_want = hf_apply(q, k, cos, sin, offsets, inverse=inverse)
    q_base, k_base = hf_apply(q, k, cos, sin, offsets, dtype=q.dtype, inverse=inverse)
    expect_close(q_got, q_want, baseline=q_base, dtype=q.dtype, input=label, what="q", hint=hint)
    expect_close(k_got, k_want, baseline=k_base, dtype=q.dtype, input=label, what="k", hint=hint)


def shapes():
    """(B, S, H_q, H_kv, D): D = 2, head counts that are not powers of two, D/2 = 40 (not a power of two)."""
    cases = [(1, 1, 1, 1, 2), (2, 7, 4, 2, 16), (3, 2, 6, 3, 80), (1, 5, 32, 8, 128)]
    return cases + ([(2, 1024, 32, 8, 128), (2, 300, 40, 8, 64)] if triton_compiled() else [])


# --------------------------------------------------------------------------------------------------- rope


def random_guarded(shape, pad):
    """(buffer, window, snapshot): a random buffer of shape + pad, its leading window, and a copy of the buffer.
    An in-place kernel reads what it writes, so NaN guards would stay NaN after a stray rotation: random guards
    change when touched (except at position 0, where the rotation is the identity)."""
    buffer = torch.randn(tuple(s + p for s, p in zip(shape, pad, strict=True)), device=triton_device())
    return buffer, buffer[tuple(slice(0, s) for s in shape)], buffer.clone()


@checks("rope", gate=True)
def kernel_touches_only_its_heads(ex):
    """launches rope_kernel on q (2, 3, 6, 6) and k (2, 3, 3, 6) windows of buffers with spare heads and columns"""
    batch, seq_len, q_heads, kv_heads, head_dim = 2, 3, 6, 3, 6
    q_buffer, q, q_snapshot = random_guarded((batch, seq_len, q_heads, head_dim), (0, 1, 2, 5))
    k_buffer, k, k_snapshot = random_guarded((batch, seq_len, kv_heads, head_dim), (0, 1, 1, 3))
    q_in, k_in = q.clone(), k.clone()
    offsets = torch.tensor([0, 5], dtype=torch.int32, device=triton_device())
    cos64, sin64 = exact_tables(5 + seq_len, head_dim)
    cos, sin = cos64.float().to(triton_device()), sin64.float().to(triton_device())
    ex.rope_kernel[(batch * seq_len,)](
        q, k, cos, sin, offsets,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), cos.stride(0),
        seq_len, q_heads, kv_heads, head_dim // 2,
        BLOCK_QH=8, BLOCK_KH=4, BLOCK_HALF=4, INVERSE=False,
    )  # fmt: skip
    label = f"q strides {q.stride()}, k strides {k.stride()}, offsets [0, 5], BLOCK_QH=8, BLOCK_KH=4, BLOCK_HALF=4"
    hint = "mask heads (h < num_heads, each tensor its own count) and columns (i < half_dim) on every load and store"
    expect_guard_untouched(q_buffer, q.shape, snapshot=q_snapshot, input=label + " (q)", hint=hint)
    expect_guard_untouched(k_buffer, k.shape, snapshot=k_snapshot, input=label + " (k)", hint=hint)
    expect_rotated(q, k, q_in, k_in, cos64, sin64, offsets, label)


@checks("rope")
def hand_checkable_rotation_by_one_radian(ex):
    """D = 2 (theta = 1), offset 1: q = (1, 0) -> (cos 1, sin 1), k = (0, 1) -> (-sin 1, cos 1)"""
    q = torch.tensor([[[[1.0, 0.0]]]], device=triton_device())
    k = torch.tensor([[[[0.0, 1.0]]]], device=triton_device())
    cos, sin = exact_tables(3, 2)
    offsets = torch.tensor([1], device=triton_device())
    ex.rope_(q, k, cos.float().to(triton_device()), sin.float().to(triton_device()), offsets)
    c, s = math.cos(1.0), math.sin(1.0)
    label = "q=[[[[1, 0]]]], k=[[[[0, 1]]]], D=2, offsets=[1]"
    expect_close(q, torch.tensor([[[[c, s]]]], dtype=torch.float64), input=label, what="q", hint=HINT_ROTATE_HALF)
    expect_close(k, torch.tensor([[[[-s, c]]]], dtype=torch.float64), input=label, what="k", hint=HINT_POSITION)


@checks("rope")
def matches_hugging_face_over_shapes_dtypes_and_offsets(ex):
    """GQA head counts, D from 2 to 128, random per-sequence offsets, fp32/fp16 (bf16 when compiled), (P, D/2) and
    (P, D) tables, vs HF apply_rotary_pos_emb in float64"""
    for dtype in triton_dtypes():
        for batch, seq_len, q_heads, kv_heads, head_dim in shapes():
            q, k, offsets, cos, sin = random_case(batch, seq_len, q_heads, kv_heads, head_dim, dtype)
            for width in ("half", "full"):
                table_cos, table_sin = (
                    (cos, sin) if width == "half" else (torch.cat((cos, cos), -1), torch.cat((sin, sin), -1))
                )
                got_q, got_k = q.clone(), k.clone()
                out = ex.rope_(got_q, got_k, table_cos.float().to(q.device), table_sin.float().to(q.device), offsets)
                label = describe(q=q, k=k, offsets=offsets.tolist()) + f", tables (P, {table_cos.shape[1]})"
                expect(
                    isinstance(out, tuple) and len(out) == 2 and out[0] is got_q and out[1] is got_k,
                    "rope_ must rotate q and k in place and return them",
                    input=label,
                    got=type(out).__name__,
                )
                expect_rotated(got_q, got_k, q, k, cos, sin, offsets, label)


@checks("rope")
def fused_qkv_views_and_decoding(ex):
    """q, k = views of one (B, S, H_q + 2 H_kv, D) QKV buffer; a decode step (S = 1) at lengths [0, 17, 3]: v untouched"""
    for seq_len, offsets in ((6, [0, 4, 9]), (1, [0, 17, 3])):
        qkv = torch.randn(3, seq_len, 6 + 2 * 3, 32, device=triton_device())
        original = qkv.clone()
        q, k = qkv[:, :, :6], qkv[:, :, 6:9]
        cos, sin = exact_tables(40, 32)
        positions = torch.tensor(offsets, dtype=torch.int64, device=triton_device())
        ex.rope_(q, k, cos.float().to(qkv.device), sin.float().to(qkv.device), positions)
        label = f"qkv (3, {seq_len}, 12, 32), q = heads 0-5, k = heads 6-8, offsets {offsets}"
        expect(
            torch.equal(qkv[:, :, 9:], original[:, :, 9:]),
            "the kernel wrote into v",
            input=label,
            expected="heads 9-11 of the QKV buffer (v) unchanged",
            got=f"{int((qkv[:, :, 9:] != original[:, :, 9:]).sum())} elements of v changed",
            hint="mask k's heads with num_kv_heads, not num_q_heads",
        )
        expect_rotated(q, k, original[:, :, :6], original[:, :, 6:9], cos, sin, positions, label, hint=HINT_POSITION)


@checks("rope")
def inverse_undoes_the_rotation(ex):
    """inverse=True rotates by -m theta (HF with -sin); in fp32, rope_(inverse) after rope_ gives back q and k"""
    for dtype in (torch.float32, torch.float16):
        q, k, offsets, cos, sin = random_case(2, 5, 4, 2, 16, dtype)
        tables = (cos.float().to(q.device), sin.float().to(q.device))
        label = describe(q=q, k=k, offsets=offsets.tolist(), inverse=True)
        got_q, got_k = ex.rope_(q.clone(), k.clone(), *tables, offsets, inverse=True)
        expect_rotated(got_q, got_k, q, k, cos, sin, offsets, label, inverse=True, hint="inverse: negate sin")
        if dtype == torch.float32:  # in fp16 the two roundings of a round trip are the dtype's, not a mistake
            back_q, back_k = ex.rope_(*ex.rope_(q.clone(), k.clone(), *tables, offsets), *tables, offsets, inverse=True)
            expect_close(back_q, q.double(), input=label + ", round trip", what="q after rope_ then inverse")
            expect_close(back_k, k.double(), input=label + ", round trip", what="k after rope_ then inverse")


@checks("rope")
def rejects_layouts_it_cannot_handle(ex):
    """an odd head_dim, q and k of different head_dim, a table of the wrong width and offsets of the wrong shape"""
    device = triton_device()
    q, k = torch.randn(2, 3, 4, 8, device=device), torch.randn(2, 3, 2, 8, device=device)
    cos, sin = (t.float().to(device) for t in exact_tables(10, 8))
    offsets = torch.zeros(2, dtype=torch.int32, device=device)
    for label, call in (
        ("D = 7", lambda: ex.rope_(torch.randn(2, 3, 4, 7, device=device), torch.randn(2, 3, 2, 7, device=device),
                                   cos[:, :3], sin[:, :3], offsets)),
        ("q D = 8, k D = 6", lambda: ex.rope_(q, k[..., :6], cos, sin, offsets)),
        ("tables (10, 3) for D = 8", lambda: ex.rope_(q, k, cos[:, :3], sin[:, :3], offsets)),
        ("offsets (3,) for B = 2", lambda: ex.rope_(q, k, cos, sin, torch.zeros(3, dtype=torch.int32, device=device))),
    ):  # fmt: skip
        expect_refused(call, input=label, hint="check head_dim parity, matching shapes, table width and offsets first")


# --------------------------------------------------------------------------------------- rotary_embedding


def autograd_reference(q, k, cos, sin, offsets, d_q, d_k):
    """(q', k', q.grad, k.grad) through HF apply_rotary_pos_emb in float64."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q64 = q.detach().cpu().double().requires_grad_()
    k64 = k.detach().cpu().double().requires_grad_()
    positions = offsets.cpu().long()[:, None] + torch.arange(q.shape[1])
    full_cos = torch.cat((cos, cos), dim=-1)[positions]
    full_sin = torch.cat((sin, sin), dim=-1)[positions]
    out_q, out_k = apply_rotary_pos_emb(q64, k64, full_cos, full_sin, unsqueeze_dim=2)
    torch.autograd.backward((out_q, out_k), (d_q.cpu().double(), d_k.cpu().double()))
    return out_q.detach(), out_k.detach(), q64.grad, k64.grad


def run_function(ex, q, k, cos, sin, offsets):
    q = q.detach().requires_grad_()
    k = k.detach().requires_grad_()
    out_q, out_k = ex.RotaryEmbedding.apply(q, k, cos.float().to(q.device), sin.float().to(q.device), offsets)
    return q, k, out_q, out_k


@checks("rotary_embedding")
def gradients_with_operands_in_their_own_layouts(ex):
    """q a fused slice, k with padded rows, the upstream gradients transposed and a window of a bigger buffer: q.grad
    and k.grad vs float64 autograd"""
    q, k, offsets, cos, sin = random_case(2, 3, 4, 2, 8, torch.float32)
    d_q, d_k = torch.randn_like(q), torch.randn_like(k)
    lq, lk, ld_q, ld_k = distinct_layouts(q, k, d_q, d_k)  # fused_slice, padded, transposed, outer_padded
    lq, lk, out_q, out_k = run_function(ex, lq, lk, cos, sin, offsets)
    torch.autograd.backward((out_q, out_k), (ld_q, ld_k))
    want_out_q, want_out_k, want_q, want_k = autograd_reference(q, k, cos, sin, offsets, d_q, d_k)
    label = describe_layouts(q=lq, k=lk, d_q=ld_q, d_k=ld_k)
    expect_close(out_q, want_out_q, input=label, what="rotated q", hint="rotate copies of q and k, read by stride")
    expect_close(out_k, want_out_k, input=label, what="rotated k", hint="rotate copies of q and k, read by stride")
    hint = "rotate d_q.contiguous().clone() and d_k.contiguous().clone() by the inverse rotation"
    expect_close(lq.grad, want_q, input=label, what="q.grad", hint=hint)
    expect_close(lk.grad, want_k, input=label, what="k.grad", hint=hint)


@checks("rotary_embedding")
def forward_is_out_of_place(ex):
    """RotaryEmbedding.apply returns rotated copies and leaves the caller's q and k unchanged"""
    for dtype in (torch.float32, torch.float16):
        q, k, offsets, cos, sin = random_case(2, 4, 4, 2, 16, dtype)
        q_in, k_in = q.clone(), k.clone()
        _, _, out_q, out_k = run_function(ex, q, k, cos, sin, offsets)
        label = describe(q=q, k=k, offsets=offsets.tolist())
        expect(
            torch.equal(q, q_in) and torch.equal(k, k_in),
            "the forward changed its inputs",
            input=label,
            expected="q and k unchanged (rotate copies)",
            got="q or k rotated in place",
            hint="rotate q.clone() and k.clone()",
        )
        expect_rotated(out_q, out_k, q_in, k_in, cos, sin, offsets, label)


@checks("rotary_embedding")
def gradients_match_float64_autograd(ex):
    """q.grad and k.grad for GQA shapes and offsets, fp32 and fp16 (bf16 when compiled), vs float64 autograd of HF"""
    for dtype in triton_dtypes():
        for batch, seq_len, q_heads, kv_heads, head_dim in shapes()[:3]:
            q, k, offsets, cos, sin = random_case(batch, seq_len, q_heads, kv_heads, head_dim, dtype)
            q, k, out_q, out_k = run_function(ex, q, k, cos, sin, offsets)
            d_q, d_k = torch.randn_like(out_q), torch.randn_like(out_k)
            torch.autograd.backward((out_q, out_k), (d_q, d_k))
            _, _, want_q, want_k = autograd_reference(q, k, cos, sin, offsets, d_q, d_k)
            base_q, base_k = hf_apply(d_q, d_k, cos, sin, offsets, dtype=dtype, inverse=True)  # R^T = R(-m)
            label = describe(q=q, k=k, offsets=offsets.tolist())
            hint = "the gradient of a rotation is the inverse rotation: rope_(..., inverse=True) on copies of d_q, d_k"
            expect_close(q.grad, want_q, baseline=base_q, dtype=dtype, input=label, what="q.grad", hint=hint)
            expect_close(k.grad, want_k, baseline=base_k, dtype=dtype, input=label, what="k.grad", hint=hint)


@checks("rotary_embedding")
def gradient_through_a_fused_qkv_projection(ex):
    """q, k = head slices of qkv (requires grad): qkv.grad matches float64 autograd, and v's part is zero"""
    qkv = torch.randn(2, 5, 8, 16, device=triton_device()).requires_grad_()
    q, k = qkv[:, :, :4], qkv[:, :, 4:6]
    offsets = torch.tensor([3, 0], dtype=torch.int32, device=triton_device())
    cos, sin = exact_tables(10, 16)
    out_q, out_k = ex.RotaryEmbedding.apply(q, k, cos.float().to(qkv.device), sin.float().to(qkv.device), offsets)
    weights_q, weights_k = torch.randn_like(out_q), torch.randn_like(out_k)
    ((out_q * weights_q).sum() + (out_k * weights_k).sum()).backward()
    _, _, want_q, want_k = autograd_reference(q, k, cos, sin, offsets, weights_q, weights_k)
    want = torch.cat((want_q, want_k, torch.zeros(2, 5, 2, 16, dtype=torch.float64)), dim=2)
    expect_close(
        qkv.grad,
        want,
        input="qkv (2, 5, 8, 16), q = heads 0-3, k = heads 4-5, v = heads 6-7, offsets [3, 0]",
        what="qkv.grad",
        hint="backward returns (d_q, d_k, None, None, None), d_q and d_k rotated by the inverse rotation",
    )


@checks("rotary_embedding")
def gradients_with_a_transposed_upstream_gradient(ex):
    """upstream gradients whose last dimension is not contiguous (a transposed view): made contiguous first"""
    q, k, offsets, cos, sin = random_case(2, 3, 4, 2, 8, torch.float32)
    q, k, out_q, out_k = run_function(ex, q, k, cos, sin, offsets)
    d_q = torch.randn(2, 3, 8, 4, device=q.device).transpose(2, 3)  # (2, 3, 4, 8), stride 4 along D
    d_k = torch.randn(2, 3, 8, 2, device=q.device).transpose(2, 3)
    torch.autograd.backward((out_q, out_k), (d_q, d_k))
    _, _, want_q, want_k = autograd_reference(q, k, cos, sin, offsets, d_q, d_k)
    label = describe(q=q, k=k) + f", d_q strides {d_q.stride()}, d_k strides {d_k.stride()}"
    hint = "the kernel needs a unit stride along D: rotate d_q.contiguous().clone() and d_k.contiguous().clone()"
    expect_close(q.grad, want_q, input=label, what="q.grad", hint=hint)
    expect_close(k.grad, want_k, input=label, what="k.grad", hint=hint)


@checks("rope")
def each_operand_in_its_own_layout(ex):
    """q a slice of a fused tensor, k with padded rows (each its own batch, seq and head strides), the cos/sin tables
    sharing one padded layout (the kernel takes one table stride); then offsets every 3rd element of a buffer, and cos
    and sin in two different layouts: refused or right"""
    q, k, offsets, cos64, sin64 = random_case(2, 5, 4, 2, 16, torch.float32)
    cos, sin = (with_layout(t.float().to(q.device), "padded") for t in (cos64, sin64))
    lq, lk = distinct_layouts(q, k, order=UNIT_LAST_STRIDE)
    label = describe_layouts(q=lq, k=lk, cos=cos) + f", offsets {offsets.tolist()}"
    ex.rope_(lq, lk, cos, sin, offsets)
    expect_rotated(lq, lk, q, k, cos64, sin64, offsets, label, hint="address q and k each with its own strides")
    cases = [
        ("offsets with stride 3 (a column of a (2, 3) tensor)", cos, sin, with_layout(offsets, "fused_slice")),
        ("cos with padded rows, sin a slice of a fused tensor", cos, with_layout(sin, "fused_slice"), offsets),
    ]
    for case, case_cos, case_sin, case_offsets in cases:
        lq, lk = distinct_layouts(q, k, order=UNIT_LAST_STRIDE)
        label = f"{case}; " + describe_layouts(cos=case_cos, sin=case_sin)
        expect_refused_or_correct(
            lambda lq=lq, lk=lk, c=case_cos, s=case_sin, o=case_offsets: ex.rope_(lq, lk, c, s, o),
            lambda result, lq=lq, lk=lk, label=label: expect_rotated(
                lq, lk, q, k, cos64, sin64, offsets, label + " (accepted, so it must be right)"
            ),
            input=label,
            hint="the kernel reads offsets_ptr + b and one table row stride: pass offsets.contiguous(), and refuse "
            "(ValueError) cos and sin of different strides, or handle them",
        )


@checks("rope")
def more_kv_heads_than_half_the_head_dim(ex):
    """D = 4 with 8 query and 8 KV heads: the head blocks come from the head counts, not from D"""
    q, k, offsets, cos, sin = random_case(2, 3, 8, 8, 4, torch.float32)
    q_in, k_in = q.clone(), k.clone()
    q_got, k_got = ex.rope_(q, k, cos.float().to(q.device), sin.float().to(q.device), offsets)
    label = describe(q=q_in, k=k_in, offsets=offsets.tolist())
    expect_rotated(q_got, k_got, q_in, k_in, cos, sin, offsets, label, hint="BLOCK_KH = next_power_of_2(H_kv)")


# ------------------------------------------------------------------------------------------------ benchmark


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _hf_style_rope(q, k, cos, sin, positions):
    """Hugging Face's formulation for (B, S, H, D): gather the (P, D) tables at the positions, broadcast over heads."""
    cos = cos[positions][:, :, None].to(q.dtype)  # (B, S, 1, D)
    sin = sin[positions][:, :, None].to(q.dtype)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def benchmark(ex):
    """Llama-3-8B's attention layout, B=4, S=4096, 32 query / 8 key heads, D=128, bf16, base 500000."""
    batch, seq_len, q_heads, kv_heads, head_dim = 4, 4096, 32, 8, 128
    q = torch.randn(batch, seq_len, q_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, seq_len, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    cos64, sin64 = exact_tables(seq_len, head_dim, base=500000.0)
    cos, sin = cos64.float().cuda(), sin64.float().cuda()
    full_cos, full_sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    offsets = torch.zeros(batch, dtype=torch.int32, device="cuda")
    positions = torch.arange(seq_len, device="cuda").expand(batch, seq_len)
    moved = 2 * (q.numel() + k.numel()) * q.element_size()
    shape = f"B{batch} S{seq_len} H{q_heads}/{kv_heads} D{head_dim} bf16"
    rows = [bandwidth_row("rope_ in place (fused)", shape, lambda: ex.rope_(q, k, cos, sin, offsets), moved)]
    rows += baseline_rows(
        "HF-style rope", shape, _hf_style_rope, (q, k, full_cos, full_sin, positions), bytes_moved=moved
    )
    rows.append(copy_row(moved // 2))
    return rows
