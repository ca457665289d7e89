"""Checks for p02.rope. References: Hugging Face `LlamaRotaryEmbedding` and `apply_rotary_pos_emb` built locally
from a tiny `LlamaConfig` (tables, oracle in float64, baseline in the dtype under test), Meta's complex-number
formulation (`torch.polar`, `torch.view_as_complex`) in float64, hand-derived closed forms, and for the long-context
rules transformers' `ROPE_INIT_FUNCTIONS["llama3"]` / `["yarn"]` (baseline) with a float64 loop spec (oracle)."""

import math
import warnings
from functools import cache

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor, reference_only
from llm_algo.references.hf import config_of

checks = Checks("p02.rope")

LOW_PRECISION = (torch.float16, torch.bfloat16)
HINT_ROUND_ONCE = "compute_dtype = torch.promote_types(x.dtype, torch.float32): rotate in float32, cast back at the end"


# ------------------------------------------------------------------------------------------ references


@cache
def hf_rotary(head_dim: int, base: float):
    """LlamaRotaryEmbedding for one head size and base; it has no weights, and nothing is downloaded."""
    with warnings.catch_warnings():  # transformers imports tqdm.auto, which warns in a kernel without ipywidgets
        warnings.simplefilter("ignore")
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    return LlamaRotaryEmbedding(config)


def hf_tables(num_positions: int, head_dim: int, base: float, dtype=torch.float32):
    """Hugging Face's cos/sin for positions 0 .. num_positions - 1: each (num_positions, head_dim) in dtype."""
    with torch.no_grad():
        cos, sin = hf_rotary(head_dim, base)(torch.empty(0, dtype=dtype), torch.arange(num_positions)[None])
    return cos[0], sin[0]


def hf_rope(x: torch.Tensor, position_ids: torch.Tensor, base: float) -> torch.Tensor:
    """Hugging Face's rotate-half RoPE of x (B, H, T, D) in x's dtype: float64 for the oracle, else the baseline."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    with torch.no_grad():
        cos, sin = hf_rotary(x.shape[-1], base)(x, position_ids)  # (B, T, D) in x.dtype
        return apply_rotary_pos_emb(x, x, cos, sin)[0]


def exact_tables(num_positions: int, head_dim: int, base: float):
    """The rotate-half tables from the closed form, in float64."""
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * theta  # (P, D/2)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def meta_complex_rope(x: torch.Tensor, position_ids: torch.Tensor, base: float) -> torch.Tensor:
    """Meta's Llama formulation in float64: adjacent coordinates as complex numbers times e^{i m theta_i}."""
    x64 = x.to(torch.float64)
    D = x64.shape[-1]
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = position_ids.to(torch.float64)[..., None] * theta  # (B, T, D/2)
    rotor = torch.polar(torch.ones_like(angles), angles)[:, None]  # (B, 1, T, D/2) complex128
    pairs = torch.view_as_complex(x64.reshape(*x64.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(pairs * rotor).flatten(-2)


def halves_first(head_dim: int):
    """The permutation P: even coordinates, then odd ones; and its inverse."""
    perm = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
    return perm, torch.argsort(perm)


def hf_rope_on_permuted(x: torch.Tensor, position_ids: torch.Tensor, base: float) -> torch.Tensor:
    """Interleaved RoPE obtained from Hugging Face's rotate-half RoPE: P^{-1} RoPE_half(P x)."""
    perm, inverse = halves_first(x.shape[-1])
    return hf_rope(x[..., perm], position_ids, base)[..., inverse]


def quarter_turn_tables():
    """Hand-made tables for D = 4: position 0 is angle 0 for both pairs; position 1 is 90 degrees for pair 0
    (theta_0) and 0 for pair 1 (theta_1). Rotate-half layout: columns [theta_0, theta_1, theta_0, theta_1]."""
    cos = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0]])
    sin = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    return cos, sin


def call_untouched(fn, x, cos, sin, position_ids):
    """Call the learner's function on copies, so an in-place write cannot corrupt the references."""
    return fn(x.clone(), cos.clone(), sin.clone(), position_ids.clone())


# Shapes (B, H, T, D), the positions of every token, and the base: a batch of one, one token, D = 2 and 16,
# lengths that are not powers of two, per-row offsets (a KV cache), random positions, and Llama 3's base.
def apply_cases():
    return [
        ((1, 1, 1, 64), torch.tensor([[0]]), 1e4),
        ((2, 3, 7, 64), torch.arange(7) + torch.tensor([[0], [11]]), 1e4),
        ((1, 4, 13, 128), torch.arange(13)[None] + 100, 5e5),
        ((3, 2, 5, 16), torch.randint(0, 512, (3, 5)), 1e4),
        ((2, 1, 33, 2), torch.arange(33)[None].repeat(2, 1) + torch.tensor([[0], [400]]), 1e4),
    ]


def relative_position_property(fn, pair_of, hint: str) -> None:
    """Shared by both pairings: lengths of pairs kept, and <RoPE(q, m), RoPE(k, n)> = closed form in m - n."""
    D, base = 64, 1e4
    cos, sin = exact_tables(4100, D, base)
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    pairs = [(3, 0), (10, 7), (1003, 1000), (4099, 4096), (0, 3), (57, 60), (2000, 2000)]
    m = torch.tensor([[a] for a, _ in pairs])  # (P, 1): the query positions, one batch row per pair
    n = torch.tensor([[b] for _, b in pairs])
    rq = call_untouched(fn, q.expand(len(pairs), 1, 1, D), cos, sin, m)
    rk = call_untouched(fn, k.expand(len(pairs), 1, 1, D), cos, sin, n)
    label = f"q, k ({D},) float64, (m, n) in {pairs}, exact float64 tables"
    expect_tensor(rq, shape=(len(pairs), 1, 1, D), dtype=torch.float64, input=label)

    a, b = pair_of(rq)
    a0, b0 = pair_of(q.expand(len(pairs), 1, 1, D))
    expect_close(
        a**2 + b**2,
        a0**2 + b0**2,
        input=label,
        what="squared length of every pair",
        hint="a rotation keeps each pair's length: " + hint,
    )

    scores = (rq * rk).sum(-1).flatten()  # (P,)
    same_gap = scores[:4]  # m - n = 3 for the first four pairs
    expect(
        bool((same_gap - same_gap[0]).abs().max() < 1e-9),
        "scores with the same m - n differ",
        input=label,
        expected=f"equal scores for (m, n) = {pairs[:4]}",
        got=", ".join(f"{s:.6g}" for s in same_gap.tolist()),
        hint="gather the table rows at position_ids; rotate q and k with the same function and the same tables",
    )
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    qz, kz = torch.complex(*pair_of(q)), torch.complex(*pair_of(k))
    gaps = (m - n).to(torch.float64)  # (P, 1)
    expected = (qz * kz.conj() * torch.polar(torch.ones_like(gaps * theta), gaps * theta)).real.sum(-1)
    expect_close(
        scores,
        expected,
        input=label,
        what="<RoPE(q, m), RoPE(k, n)>",
        hint="the score must be Re sum q_i conj(k_i) e^{i (m - n) theta_i}: gather the table rows at "
        "position_ids; " + hint,
    )


def low_precision_inputs(fn, reference, hint: str) -> None:
    """Shared by both pairings: fp16/bf16 x with float32 tables; float64 oracle and a baseline in x's dtype."""
    base = 1e4
    cos, sin = hf_tables(4200, 64, base)
    position_ids = torch.arange(9)[None] + torch.tensor([[0], [4096]])  # one row deep into the context
    for dtype in LOW_PRECISION:
        x = (torch.randn(2, 3, 9, 64, dtype=torch.float64) * 3).to(dtype)
        label = describe(x=x, cos=cos) + ", positions 0..8 and 4096..4104"
        got = call_untouched(fn, x, cos, sin, position_ids)
        expect_tensor(
            got,
            shape=x.shape,
            dtype=dtype,
            input=label,
            hint="compute in float32, then cast the result back to x's dtype",
        )
        expect_close(
            got,
            reference(x.double(), position_ids, base),
            baseline=reference(x, position_ids, base),
            input=label,
            hint=hint,
        )


def rounded_once(fn, reference, hint: str) -> None:
    """fp16/bf16 x with float32 tables, no baseline: computed in float32 and rounded once at the end, the result
    is within the dtype's own tolerance of the float64 value (rotating in fp16 rounds every product and sum)."""
    base = 1e4
    cos, sin = hf_tables(4200, 64, base)
    position_ids = torch.arange(9)[None] + torch.tensor([[0], [4096]])
    for dtype in LOW_PRECISION:
        x = (torch.randn(2, 3, 9, 64, dtype=torch.float64) * 3).to(dtype)
        label = describe(x=x, cos=cos) + ", positions 0..8 and 4096..4104, compared without a low-precision baseline"
        expect_close(
            call_untouched(fn, x, cos, sin, position_ids),
            reference(x.double(), position_ids, base),
            input=label,
            hint=hint,
        )


# ------------------------------------------------------------------------------------------ rope_cache


@checks("rope_cache")
def hand_checkable_table(ex):
    """head_dim = 4, base = 100: theta = (1, 0.1), so row m is cos/sin of [m, 0.1 m, m, 0.1 m]"""
    cos, sin = ex.rope_cache(3, 4, base=100.0)
    label = "rope_cache(seq_len=3, head_dim=4, base=100)"
    angles = torch.tensor([[m, 0.1 * m, m, 0.1 * m] for m in range(3)], dtype=torch.float64)
    expect_tensor(cos, shape=(3, 4), dtype=torch.float32, input=label, what="cos")
    expect_close(
        cos,
        angles.cos(),
        input=label,
        what="cos",
        hint="theta_i = base ** (-2i / head_dim) for i < head_dim / 2 (arange(0, head_dim, 2) / head_dim), "
        "and the columns are [all angles, all angles] (torch.cat), not each angle twice in a row",
    )
    expect_close(sin, angles.sin(), input=label, what="sin", hint="return (cos, sin) in that order")


@checks("rope_cache")
def matches_llama_rotary_embedding(ex):
    """float32 tables over sizes and bases (10^4, 5*10^5, 10^6) match LlamaRotaryEmbedding's positions 0..T-1"""
    for seq_len, head_dim, base in [(1, 64, 1e4), (37, 128, 1e4), (100, 2, 1e4), (300, 64, 5e5), (17, 96, 1e6)]:
        cos, sin = ex.rope_cache(seq_len, head_dim, base=base)
        label = f"rope_cache(seq_len={seq_len}, head_dim={head_dim}, base={base:g})"
        exact_cos, exact_sin = exact_tables(seq_len, head_dim, base)
        hf_cos, hf_sin = hf_tables(seq_len, head_dim, base)
        for what, got, exact, hf in (("cos", cos, exact_cos, hf_cos), ("sin", sin, exact_sin, hf_sin)):
            expect_tensor(got, shape=(seq_len, head_dim), dtype=torch.float32, input=label, what=what)
            expect_close(
                got,
                exact,
                baseline=hf,
                input=label,
                what=what,
                hint="use the base argument; theta_i = base ** (-2i / head_dim) with 2i = arange(0, head_dim, 2)",
            )


@checks("rope_cache")
def long_context_in_every_dtype(ex):
    """8192 positions in float32, fp16, bf16 and float64: angles computed in at least float32, one cast at the end"""
    seq_len, head_dim = 8192, 64
    for dtype, base in [(torch.float32, 5e5), (torch.bfloat16, 5e5), (torch.float16, 1e4), (torch.float64, 5e5)]:
        cos, sin = ex.rope_cache(seq_len, head_dim, base=base, dtype=dtype)
        label = f"rope_cache(seq_len={seq_len}, head_dim={head_dim}, base={base:g}, dtype={str(dtype).removeprefix('torch.')})"
        exact_cos, exact_sin = exact_tables(seq_len, head_dim, base)
        hf_cos, hf_sin = hf_tables(seq_len, head_dim, base, dtype) if dtype != torch.float64 else (None, None)
        for what, got, exact, hf in (("cos", cos, exact_cos, hf_cos), ("sin", sin, exact_sin, hf_sin)):
            expect_tensor(
                got,
                shape=(seq_len, head_dim),
                dtype=dtype,
                input=label,
                what=what,
                hint="cast the finished table to the dtype argument",
            )
            expect_close(
                got,
                exact,
                baseline=hf,
                input=label,
                what=what,
                hint="compute positions, theta and their product in torch.promote_types(dtype, float32): "
                "bf16 cannot even store position 257, and float64 must stay float64",
            )


# ------------------------------------------------------------------------------------------ rotate-half


@checks("apply_rope_rotate_half")
def quarter_turn_by_hand(ex):
    """hand tables, 90 degrees: D = 2 maps (3, 4) to (-4, 3); D = 4 pairs (x0, x2) and (x1, x3)"""
    cos, sin = torch.tensor([[1.0, 1.0], [0.0, 0.0]]), torch.tensor([[0.0, 0.0], [1.0, 1.0]])  # D = 2: [theta_0] twice
    got = call_untouched(ex.apply_rope_rotate_half, torch.tensor([[[[3.0, 4.0]]]]), cos, sin, torch.tensor([[1]]))
    expect_close(
        got,
        torch.tensor([[[[-4.0, 3.0]]]], dtype=torch.float64),
        input="x = [3, 4] at position 1, table angle 90 degrees (cos 0, sin 1)",
        hint="y = x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1), and the table row is "
        "position_ids[b, t] (here row 1), not t",
    )
    cos, sin = quarter_turn_tables()
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]]])
    got = call_untouched(ex.apply_rope_rotate_half, x, cos, sin, torch.tensor([[1, 0]]))
    expected = torch.tensor([[[[-3.0, 2.0, 1.0, 4.0], [5.0, 6.0, 7.0, 8.0]]]], dtype=torch.float64)
    expect_close(
        got,
        expected,
        input="x = [[1, 2, 3, 4], [5, 6, 7, 8]] at positions [1, 0]; position 1 turns pair 0 "
        "by 90 degrees, pair 1 by 0",
        hint="pair i is (x_i, x_{i + D/2}); token t uses table row position_ids[b, t], not row t",
    )


@checks("apply_rope_rotate_half")
def matches_hugging_face_apply_rotary_pos_emb(ex):
    """LlamaRotaryEmbedding tables; shapes with D = 2..128, offsets and random positions match apply_rotary_pos_emb"""
    for shape, position_ids, base in apply_cases():
        cos, sin = hf_tables(1024, shape[-1], base)
        x = torch.randn(shape)
        label = (
            f"{describe(x=x, position_ids=position_ids)}, base={base:g}, "
            f"positions {position_ids.flatten()[:6].tolist()}..."
        )
        got = call_untouched(ex.apply_rope_rotate_half, x, cos, sin, position_ids)
        expect_tensor(got, shape=x.shape, dtype=x.dtype, input=label)
        expect_close(
            got,
            hf_rope(x.double(), position_ids, base),
            baseline=hf_rope(x, position_ids, base),
            input=label,
            hint="x * cos[position_ids] + rotate_half(x) * sin[position_ids], with the tables unsqueezed to "
            "(B, 1, T, D) so they broadcast over heads",
        )


@checks("apply_rope_rotate_half")
def kv_cache_decoding_and_left_padding(ex):
    """a T = 1 decoding step at positions 4095, 0 and 517, and a left-padded batch, match Hugging Face"""
    base = 5e5
    cos, sin = hf_tables(4096, 128, base)
    x = torch.randn(3, 2, 1, 128)
    position_ids = torch.tensor([[4095], [0], [517]])
    label = describe(x=x) + ", one new token per row at positions [4095, 0, 517] (KV-cache decoding)"
    expect_close(
        call_untouched(ex.apply_rope_rotate_half, x, cos, sin, position_ids),
        hf_rope(x.double(), position_ids, base),
        baseline=hf_rope(x, position_ids, base),
        input=label,
        hint="a decoding step has T = 1 but its position is past_len, not 0: index the tables with position_ids",
    )
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # what transformers 5's generate computes
    x = torch.randn(2, 3, 6, 128)
    label = describe(x=x) + f", left-padded batch, position_ids {position_ids.tolist()}"
    expect_close(
        call_untouched(ex.apply_rope_rotate_half, x, cos, sin, position_ids),
        hf_rope(x.double(), position_ids, base),
        baseline=hf_rope(x, position_ids, base),
        input=label,
        hint="each row has its own positions: gather cos[position_ids] of shape (B, T, D), not cos[:T]",
    )


@checks("apply_rope_rotate_half")
def rotation_and_relative_position(ex):
    """float64: pairs (i, i + D/2) keep their length, and <RoPE(q, m), RoPE(k, n)> depends only on m - n"""
    half = 32
    relative_position_property(
        ex.apply_rope_rotate_half,
        lambda v: (v[..., :half], v[..., half:]),
        "pair i is (x_i, x_{i + D/2}) and rotates by +m theta_i (x_i cos - x_{i+D/2} sin)",
    )


@checks("apply_rope_rotate_half")
def half_precision_inputs(ex):
    """fp16 and bf16 queries with float32 tables: computed in float32, returned in the input dtype"""
    low_precision_inputs(
        ex.apply_rope_rotate_half,
        hf_rope,
        "upcast x and the gathered cos/sin to float32, rotate, cast back once at the end",
    )


@checks("apply_rope_rotate_half")
def inputs_left_untouched(ex):
    """x and the tables are not modified in place"""
    cos, sin = hf_tables(16, 8, 1e4)
    x = torch.randn(1, 2, 5, 8)
    before = (x.clone(), cos.clone(), sin.clone())
    ex.apply_rope_rotate_half(x, cos, sin, torch.arange(5)[None] + 3)
    changed = [
        name
        for name, now, then in zip(("x", "cos", "sin"), (x, cos, sin), before, strict=True)
        if not torch.equal(now, then)
    ]
    expect(
        not changed,
        "an input was modified in place",
        input=describe(x=x, cos=cos),
        expected="x, cos and sin unchanged",
        got=f"{', '.join(changed)} changed",
        hint="build new tensors (x * cos + ...), no x[..., :h] = ... or mul_; the caller still needs x",
    )


@checks("apply_rope_rotate_half")
def half_precision_rounded_once(ex):
    """fp16 and bf16 queries: rotated in float32 and rounded to the input dtype once, at the end"""
    rounded_once(ex.apply_rope_rotate_half, hf_rope, HINT_ROUND_ONCE)


# ------------------------------------------------------------------------------------------ interleaved


@checks("apply_rope_interleaved")
def quarter_turn_by_hand_interleaved(ex):
    """hand tables, D = 4: position 1 turns pair (x0, x1) by 90 degrees and leaves (x2, x3)"""
    cos, sin = quarter_turn_tables()
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]]])
    got = call_untouched(ex.apply_rope_interleaved, x, cos, sin, torch.tensor([[1, 0]]))
    expected = torch.tensor([[[[-2.0, 1.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]]], dtype=torch.float64)
    expect_close(
        got,
        expected,
        input="x = [[1, 2, 3, 4], [5, 6, 7, 8]] at positions [1, 0]; position 1 is 90 degrees "
        "for pair 0 (cos column 0) and 0 for pair 1 (cos column 1)",
        hint="pair i is (x_2i, x_2i+1) and uses table column i (the first D/2 columns); write the rotated "
        "pair back to positions 2i and 2i+1 (stack on a new last axis, then flatten)",
    )


@checks("apply_rope_interleaved")
def matches_meta_complex_multiplication(ex):
    """float64 closed form: view_as_complex on adjacent pairs times torch.polar(1, m theta), over shapes and offsets"""
    for shape, position_ids, base in apply_cases():
        cos, sin = exact_tables(1024, shape[-1], base)
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(shape, dtype=dtype)
            label = (
                f"{describe(x=x, position_ids=position_ids)}, base={base:g}, "
                f"positions {position_ids.flatten()[:6].tolist()}..."
            )
            got = call_untouched(ex.apply_rope_interleaved, x, cos, sin, position_ids)
            expect_tensor(got, shape=x.shape, dtype=dtype, input=label)
            expect_close(
                got,
                meta_complex_rope(x, position_ids, base),
                input=label,
                hint="(x_2i + i x_2i+1) * e^{i m theta_i}: real part x_2i cos - x_2i+1 sin, imaginary part "
                "x_2i sin + x_2i+1 cos, with theta_i from table column i < D/2",
            )


@checks("apply_rope_interleaved")
def same_rotation_on_a_permuted_head_dim(ex):
    """interleaved(x) = P^-1 rotate_half(P x), P = evens then odds: checked against Hugging Face's apply_rotary_pos_emb"""
    for shape, position_ids, base in apply_cases()[1:]:
        cos, sin = hf_tables(1024, shape[-1], base)
        x = torch.randn(shape)
        label = describe(x=x) + f", base={base:g}, compared with HF's rotate-half on x[..., evens then odds]"
        expect_close(
            call_untouched(ex.apply_rope_interleaved, x, cos, sin, position_ids),
            hf_rope_on_permuted(x.double(), position_ids, base),
            baseline=hf_rope_on_permuted(x, position_ids, base),
            input=label,
            hint="the interleaved pairs are adjacent (x[..., 0::2], x[..., 1::2]), not the two halves",
        )


@checks("apply_rope_interleaved")
def rotation_and_relative_position_interleaved(ex):
    """float64: pairs (2i, 2i + 1) keep their length, and <RoPE(q, m), RoPE(k, n)> depends only on m - n"""
    relative_position_property(
        ex.apply_rope_interleaved,
        lambda v: (v[..., 0::2], v[..., 1::2]),
        "pair i is (x_2i, x_2i+1) and rotates by +m theta_i (x_2i cos - x_2i+1 sin)",
    )


@checks("apply_rope_interleaved")
def half_precision_inputs_interleaved(ex):
    """fp16 and bf16 queries with float32 tables: computed in float32, returned in the input dtype"""
    low_precision_inputs(
        ex.apply_rope_interleaved,
        hf_rope_on_permuted,
        "upcast x and the gathered cos/sin to float32, rotate, cast back once at the end",
    )


@checks("apply_rope_interleaved")
def half_precision_rounded_once_interleaved(ex):
    """fp16 and bf16 queries: rotated in float32 and rounded to the input dtype once, at the end"""
    rounded_once(ex.apply_rope_interleaved, hf_rope_on_permuted, HINT_ROUND_ONCE)


# ------------------------------------------------------------------------------------------ scaled_inv_freq

# (name, head_dim, rope_parameters): published long-context configs and small made-up ones whose pairs fall in
# every band (keep, blend, interpolate)
LLAMA3_CONFIGS = [
    (
        "Llama-3.1-8B",
        128,
        dict(
            rope_type="llama3",
            rope_theta=500000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
    ),
    (
        "Llama-3.2-1B",
        64,
        dict(
            rope_type="llama3",
            rope_theta=500000.0,
            factor=32.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
    ),
    (
        "made-up, D = 16",
        16,
        dict(
            rope_type="llama3",
            rope_theta=10000.0,
            factor=4.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=256,
        ),
    ),
    (
        "made-up, D = 24, low 2, high 8",
        24,
        dict(
            rope_type="llama3",
            rope_theta=10000.0,
            factor=6.0,
            low_freq_factor=2.0,
            high_freq_factor=8.0,
            original_max_position_embeddings=512,
        ),
    ),
]
YARN_CONFIGS = [
    (
        "Qwen2.5 YaRN x4",
        128,
        dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0, original_max_position_embeddings=32768),
    ),
    (
        "gpt-oss",
        64,
        dict(
            rope_type="yarn",
            rope_theta=150000.0,
            factor=32.0,
            original_max_position_embeddings=4096,
            beta_fast=32.0,
            beta_slow=1.0,
            truncate=False,
        ),
    ),
    (
        "DeepSeek-V3 (mscale)",
        64,
        dict(
            rope_type="yarn",
            rope_theta=10000.0,
            factor=40.0,
            original_max_position_embeddings=4096,
            beta_fast=32.0,
            beta_slow=1.0,
            mscale=1.0,
            mscale_all_dim=1.0,
        ),
    ),
    (
        "made-up, mscale 0.7 / 1.0",
        32,
        dict(
            rope_type="yarn",
            rope_theta=10000.0,
            factor=16.0,
            original_max_position_embeddings=1024,
            mscale=0.7,
            mscale_all_dim=1.0,
        ),
    ),
    (
        "made-up, D = 16, attention_factor 1.3",
        16,
        dict(
            rope_type="yarn", rope_theta=10000.0, factor=8.0, original_max_position_embeddings=64, attention_factor=1.3
        ),
    ),
    (
        "made-up, base 10: the correction range clipped at head_dim - 1",
        16,
        dict(rope_type="yarn", rope_theta=10.0, factor=4.0, original_max_position_embeddings=1024),
    ),
    (
        "made-up, original context 4: a = b = 0",
        8,
        dict(rope_type="yarn", rope_theta=10000.0, factor=2.0, original_max_position_embeddings=4),
    ),
    (
        "made-up, factor 1.5",
        12,
        dict(rope_type="yarn", rope_theta=10000.0, factor=1.5, original_max_position_embeddings=128),
    ),
    (
        "made-up, D = 20, beta 8 / 2",
        20,
        dict(
            rope_type="yarn",
            rope_theta=5000.0,
            factor=3.0,
            original_max_position_embeddings=300,
            beta_fast=8.0,
            beta_slow=2.0,
        ),
    ),
]


def scaled_config(head_dim: int, params: dict):
    factor = params.get("factor", 1.0)
    fields = dict(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=head_dim,
        intermediate_size=8,
        num_hidden_layers=1,
        vocab_size=16,
        max_position_embeddings=int(params.get("original_max_position_embeddings", 64) * factor),
        rope_parameters=dict(params),
    )
    return config_of("LlamaConfig", fields)


def hf_init(head_dim: int, params: dict):
    """transformers' own initialiser for this rope_type: (inv_freq float32, attention_factor)."""
    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](
            scaled_config(head_dim, params), torch.device("cpu")
        )
    return inv_freq, float(attention_factor)


def spec_llama3(head_dim: int, p: dict) -> list[float]:
    """Llama 3.1's rule, pair by pair in float64 (Meta's apply_scaling): keep, divide, or blend by wavelength."""
    out = []
    for i in range(head_dim // 2):
        theta = p["rope_theta"] ** (-2 * i / head_dim)
        wavelength = 2 * math.pi / theta
        short, long = (
            p["original_max_position_embeddings"] / p["high_freq_factor"],
            (p["original_max_position_embeddings"] / p["low_freq_factor"]),
        )
        if wavelength < short:
            out.append(theta)
        elif wavelength > long:
            out.append(theta / p["factor"])
        else:
            smooth = (p["original_max_position_embeddings"] / wavelength - p["low_freq_factor"]) / (
                p["high_freq_factor"] - p["low_freq_factor"]
            )
            out.append((1 - smooth) * theta / p["factor"] + smooth * theta)
    return out


def spec_yarn(head_dim: int, p: dict) -> tuple[list[float], float]:
    """YaRN pair by pair in float64 (Peng et al., 2023, as transformers configures it)."""
    base, s, length = p["rope_theta"], p["factor"], p["original_max_position_embeddings"]
    turns_to_pair = lambda turns: head_dim * math.log(length / (turns * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    low, high = turns_to_pair(p.get("beta_fast", 32.0)), turns_to_pair(p.get("beta_slow", 1.0))
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    high = high + 0.001 if high == low else high
    out = []
    for i in range(head_dim // 2):
        theta = base ** (-2 * i / head_dim)
        interpolate = min(max((i - low) / (high - low), 0.0), 1.0)
        out.append(interpolate * theta / s + (1 - interpolate) * theta)
    if "attention_factor" in p:
        factor = p["attention_factor"]
    elif p.get("mscale") and p.get("mscale_all_dim"):
        factor = (0.1 * p["mscale"] * math.log(s) + 1) / (0.1 * p["mscale_all_dim"] * math.log(s) + 1)
    else:
        factor = 0.1 * math.log(s) + 1 if s > 1 else 1.0
    return out, factor


def expect_frequencies(ex, name, head_dim, params, spec, hint):
    got, got_factor = ex.scaled_inv_freq(head_dim, dict(params))
    label = f"{name}: head_dim={head_dim}, rope_parameters={params}"
    reference, reference_factor = hf_init(head_dim, params)
    expect_tensor(
        got,
        shape=(head_dim // 2,),
        dtype=torch.float32,
        input=label,
        what="inv_freq",
        hint="return the head_dim/2 frequencies in float32, as transformers does",
    )
    expect_close(
        got, torch.tensor(spec, dtype=torch.float64), baseline=reference, input=label, what="inv_freq", hint=hint
    )
    expect(
        isinstance(got_factor, float) and math.isclose(got_factor, reference_factor, rel_tol=1e-9),
        "wrong attention factor",
        input=label,
        expected=f"{reference_factor!r} (a Python float, as transformers' initialiser returns)",
        got=repr(got_factor),
        hint="llama3: 1.0; yarn: attention_factor if given, else (0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1) "
        "when both are given, else 0.1 ln s + 1",
    )


@checks("scaled_inv_freq")
def llama3_matches_transformers(ex):
    """rope_type="llama3": Llama 3.1, Llama 3.2 and made-up configs equal ROPE_INIT_FUNCTIONS["llama3"]"""
    for name, head_dim, params in LLAMA3_CONFIGS:
        expect_frequencies(
            ex,
            name,
            head_dim,
            params,
            spec_llama3(head_dim, params),
            hint="wavelength 2 pi / theta: below L / high_freq_factor keep theta, above L / low_freq_factor use "
            "theta / factor, in between (1 - g) theta / factor + g theta with g = (L / wavelength - low) / (high - low)",
        )


@checks("scaled_inv_freq")
def yarn_matches_transformers(ex):
    """rope_type="yarn": Qwen2.5, gpt-oss (truncate false), DeepSeek-V3 (mscale) and made-up configs equal
    ROPE_INIT_FUNCTIONS["yarn"], frequencies and attention factor"""
    for name, head_dim, params in YARN_CONFIGS:
        spec, _ = spec_yarn(head_dim, params)
        expect_frequencies(
            ex,
            name,
            head_dim,
            params,
            spec,
            hint="ramp over the pair index i: r = clamp((i - a) / (b - a), 0, 1) with a = floor(d(beta_fast)), "
            "b = ceil(d(beta_slow)) (no rounding when truncate is false), clipped to [0, head_dim - 1]; "
            "theta' = r theta / s + (1 - r) theta",
        )


@checks("scaled_inv_freq")
def tables_match_llama_rotary_embedding(ex):
    """scaled_rope_cache equals LlamaRotaryEmbedding's cos, sin (attention factor included) up to 4x the original
    context, in float32 and bfloat16; rope_type "default" gives the plain tables"""
    cases = [
        (
            "made-up YaRN",
            16,
            dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64),
        ),
        ("made-up llama3", 16, LLAMA3_CONFIGS[2][2]),
        ("default", 16, dict(rope_type="default", rope_theta=10000.0)),
    ]
    for name, head_dim, params in cases:
        seq_len = 4 * params.get("original_max_position_embeddings", 64)
        with reference_only(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

            rotary = LlamaRotaryEmbedding(scaled_config(head_dim, params))
            positions = torch.arange(seq_len)[None]
            probe = torch.zeros(1, seq_len, head_dim)
            oracle = [t[0].double() for t in rotary(probe.double(), positions)]
        for dtype in (torch.float32, torch.bfloat16):
            got = ex.scaled_rope_cache(seq_len, head_dim, dict(params), dtype=dtype)
            with reference_only():
                baseline = [t[0] for t in rotary(probe.to(dtype), positions)]
            label = f"scaled_rope_cache({seq_len}, {head_dim}, {name}: {params}, dtype={dtype})"
            expect(isinstance(got, tuple) and len(got) == 2, "scaled_rope_cache must return (cos, sin)", input=label)
            for what, table, want, base in zip(("cos", "sin"), got, oracle, baseline, strict=True):
                expect_tensor(table, shape=(seq_len, head_dim), dtype=dtype, input=label, what=what)
                expect_close(
                    table,
                    want,
                    baseline=base,
                    input=label,
                    what=what,
                    hint="angles = positions x scaled inv_freq in float32, [angles, angles], cos and sin "
                    "each multiplied by the attention factor, then cast to dtype",
                )


@checks("scaled_inv_freq")
def bands_by_hand(ex):
    """factor 1 changes nothing; Llama 3.1 keeps its fastest pair and divides its slowest by 8; YaRN x4 keeps pair 0,
    divides the last by 4 and scales attention by 0.1 ln 4 + 1"""
    plain = 500000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    llama = dict(LLAMA3_CONFIGS[0][2])
    got, factor = ex.scaled_inv_freq(128, llama)
    label = "Llama-3.1-8B: head_dim 128, base 500000, factor 8, L 8192"
    expect(
        math.isclose(float(got[0]), 1.0, rel_tol=1e-6)
        and math.isclose(float(got[-1]), float(plain[-1]) / 8, rel_tol=1e-5),
        "the fastest and slowest pairs are not kept and divided by the factor",
        input=label,
        expected=f"inv_freq[0] = 1 (wavelength 6.3 < 2048: kept), inv_freq[63] = {float(plain[-1]) / 8:.4e} (theta / 8)",
        got=f"inv_freq[0] = {float(got[0]):.6g}, inv_freq[63] = {float(got[-1]):.4e}",
        hint="short waves keep theta, long waves get theta / factor: not the other way round",
    )
    defaults = {k: v for k, v in llama.items() if k not in ("low_freq_factor", "high_freq_factor")}
    got_defaults, _ = ex.scaled_inv_freq(128, defaults)
    expect_close(
        got_defaults,
        torch.tensor(spec_llama3(128, llama), dtype=torch.float64),
        baseline=got,
        input=f"rope_parameters={defaults} (low_freq_factor and high_freq_factor left out)",
        what="inv_freq",
        hint="the defaults are Llama 3.1's: low_freq_factor 1, high_freq_factor 4",
    )
    for params in (
        dict(llama, factor=1.0),
        dict(YARN_CONFIGS[0][2], factor=1.0),
    ):
        got, factor = ex.scaled_inv_freq(128, params)
        base = params["rope_theta"]
        want = base ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
        label = f"rope_parameters={params} (factor 1: nothing to extend)"
        expect_close(got, want, input=label, what="inv_freq", hint="with factor 1 both branches of the blend are theta")
        expect(
            factor == 1.0,
            "factor 1 must leave the attention factor at 1",
            input=label,
            expected="1.0",
            got=repr(factor),
            hint="0.1 ln(1) + 1 = 1; the temperature only applies for factor > 1",
        )
    params = dict(YARN_CONFIGS[0][2])
    got, factor = ex.scaled_inv_freq(128, params)
    label = "Qwen2.5 YaRN: head_dim 128, base 1e6, factor 4, L 32768"
    plain = 1e6 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    expect(
        math.isclose(float(got[0]), 1.0, rel_tol=1e-6)
        and math.isclose(float(got[-1]), float(plain[-1]) / 4, rel_tol=1e-5)
        and math.isclose(factor, 0.1 * math.log(4) + 1, rel_tol=1e-9),
        "YaRN's ends or its attention factor are wrong",
        input=label,
        expected=f"inv_freq[0] = 1, inv_freq[63] = {float(plain[-1]) / 4:.4e}, attention factor {0.1 * math.log(4) + 1:.6f}",
        got=f"inv_freq[0] = {float(got[0]):.6g}, inv_freq[63] = {float(got[-1]):.4e}, attention factor {factor!r}",
        hint="the ramp is 0 (keep) below pair a and 1 (theta / s) above pair b; attention factor 0.1 ln s + 1",
    )


@checks("scaled_inv_freq")
def refuses_bad_parameters(ex):
    """an odd head_dim, rope_type "ntk", factor 0.5, high_freq_factor == low_freq_factor: ValueError"""
    bad = [
        (15, dict(LLAMA3_CONFIGS[2][2])),
        (16, dict(rope_type="ntk", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64)),
        (16, dict(YARN_CONFIGS[4][2], factor=0.5)),
        (16, dict(LLAMA3_CONFIGS[2][2], high_freq_factor=1.0)),
    ]
    for head_dim, params in bad:
        expect_refused(
            lambda head_dim=head_dim, params=params: ex.scaled_inv_freq(head_dim, params),
            input=f"head_dim={head_dim}, rope_parameters={params}",
            hint="validate first: head_dim even, rope_type in (default, llama3, yarn), factor >= 1, high > low",
            errors=(ValueError,),
        )
