"""Checks for p00.numpy_einsum. References: `np.broadcast_shapes` (captured before the learner runs) and hand
cases; each einsum string against the operation written with `matmul`, `np.trace`, `np.outer`, transposes and a
float64 loop; `F.scaled_dot_product_attention` in float64 (float32 SDPA as the low-precision baseline)."""

import numpy as np
import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, expect_value_error
from llm_algo.check.restrictions import ATTENTION, SOFTMAX

checks = Checks("p00.numpy_einsum")
checks.restrict(
    "broadcast_shape",
    forbid=(
        torch.broadcast_shapes,
        torch.broadcast_tensors,
        torch.broadcast_to,
        *(getattr(np, name) for name in ("broadcast_shapes", "broadcast", "broadcast_to", "broadcast_arrays")),
    ),
    instead="apply the rule to the sizes yourself (np.broadcast_shapes is the checks' reference)",
)
checks.restrict(
    "attention_numpy",
    forbid=[*ATTENTION, *SOFTMAX],
    instead="write the scores, the masked softmax and the weighted sum with NumPy (SDPA is the checks' reference)",
)

REFERENCE_BROADCAST = np.broadcast_shapes  # captured before any learner code can be patched around it


def learner_broadcast(ex, *shapes):
    return ex.broadcast_shape(*shapes)


# ------------------------------------------------------------------------------------------ broadcast_shape

HINT_BROADCAST = "align on the right, a missing dim counts as 1; sizes must be equal or 1; the result takes the other"


def expect_shape(ex, shapes, label=""):
    want = REFERENCE_BROADCAST(*shapes)
    got = learner_broadcast(ex, *shapes)
    expect(
        isinstance(got, tuple) and all(isinstance(s, int) for s in got) and got == want,
        "wrong broadcast shape",
        input=label or f"shapes={shapes}",
        expected=str(want),
        got=repr(got),
        hint=HINT_BROADCAST,
    )


@checks("broadcast_shape")
def attention_masks_by_hand(ex):
    """a padding mask over scores, a causal mask from a column and a row, a bias, and scalars"""
    cases = [
        (((2, 8, 5, 7), (2, 1, 1, 7)), "scores (B, H, T, S) and a padding mask (B, 1, 1, S)"),
        (((5, 1), (1, 7)), "arange(T)[:, None] >= arange(S)[None, :]"),
        (((2, 5, 64), (64,)), "hidden (B, T, C) + a bias (C,)"),
        (((5,), (5, 1)), "the silent bug: a (T,) vector minus a (T, 1) column gives (T, T)"),
        (((), (3, 4)), "a 0-d scalar with a matrix"),
        (((),), "a single 0-d shape"),
        (((6, 1, 5, 1), (7, 1, 3), (1, 1)), "three operands: (6, 1, 5, 1), (7, 1, 3), (1, 1)"),
    ]
    for shapes, label in cases:
        expect_shape(ex, shapes, label=f"shapes={shapes}: {label}")
    got = learner_broadcast(ex)
    expect(got == (), "no shapes must give ()", input="broadcast_shape()", expected="()", got=repr(got))


@checks("broadcast_shape")
def random_compatible_shapes(ex):
    """200 random sets of 1 to 4 compatible shapes (size-1 and missing dims) agree with np.broadcast_shapes"""
    for _ in range(200):
        ndim = int(torch.randint(0, 5, ()))
        full = [int(s) for s in torch.randint(2, 6, (ndim,))]
        shapes = []
        for _ in range(int(torch.randint(1, 5, ()))):
            keep = int(torch.randint(0, ndim + 1, ()))
            shape = [1 if torch.rand(()) < 0.4 else size for size in full[ndim - keep :]]
            shapes.append(tuple(shape))
        expect_shape(ex, tuple(shapes))


@checks("broadcast_shape")
def zero_sizes(ex):
    """size 0 is a size like any other: (0,) with (1,) gives (0,); (0,) with (3,) is an error"""
    expect_shape(ex, ((0,), (1,)))
    expect_shape(ex, ((4, 0), (1, 1), (0,)))
    expect_shape(ex, ((2, 1, 0), (3, 1)))
    expect_value_error(
        lambda: learner_broadcast(ex, (0,), (3,)),
        "shapes=((0,), (3,))",
        "0 is not 1: sizes 0 and 3 cannot broadcast",
    )


@checks("broadcast_shape")
def incompatible_shapes_refused(ex):
    """per-sequence lengths (B,) against (B, T), (2, 3) against (3, 2), a clash in the third of three operands"""
    for shapes in [((4,), (4, 6)), ((2, 3), (3, 2)), ((5, 1), (1, 7), (4, 7)), ((2, 8, 5, 7), (2, 1, 5, 1, 7))]:
        expect_value_error(
            lambda s=shapes: learner_broadcast(ex, *s),
            f"shapes={shapes}",
            "sizes that are neither equal nor 1 must raise ValueError (do not take the max)",
        )


# ------------------------------------------------------------------------------------------ einsum_specs

NAMES = (
    "batched_matmul",
    "linear",
    "attention_scores",
    "attention_output",
    "gqa_scores",
    "trace",
    "outer",
    "bilinear",
    "row_dot",
)


def rand(*shape):
    return np.random.default_rng(int(torch.randint(0, 2**31, ()))).standard_normal(shape)


def specs_of(ex):
    specs = ex.einsum_specs()
    missing = [name for name in NAMES if not isinstance(specs, dict) or not isinstance(specs.get(name), str)]
    expect(
        not missing,
        "einsum_specs() lacks some operations (or they are not strings)",
        input="einsum_specs()",
        expected=", ".join(NAMES),
        got="missing: " + ", ".join(missing),
        hint="return a dict with one subscripts string per name of the table",
    )
    return specs


def expect_einsum(specs, name, operands, want, label):
    spec = specs[name]
    expect(
        "->" in spec,
        f"the {name} subscripts have no explicit output",
        input=f"{name}: {spec!r}",
        expected="'...->...'",
        got=repr(spec),
        hint="always write '->' and the output letters: implicit mode sorts the output letters alphabetically",
    )
    try:
        got = np.einsum(spec, *operands)
    except ValueError as exc:
        expect(
            False,
            f"np.einsum refused the {name} subscripts for these inputs",
            input=label,
            expected=f"an array of shape {want.shape}",
            got=str(exc).splitlines()[0][:120],
            hint="one letter per axis of each input, in the order of the table; same letter = same axis",
        )
    expect_close(
        torch.from_numpy(np.asarray(got)),
        torch.from_numpy(want),
        input=f"{label}, {name}: {spec!r}",
        hint="letters left out of the output are summed; the output's letter order is the result's axis order",
    )


@checks("einsum_specs")
def matmul_family(ex):
    """batched_matmul, linear (weights (d_out, d_in)) and row_dot against matmul, x @ w.T and a diagonal"""
    specs = specs_of(ex)
    a, b = rand(3, 4, 5), rand(3, 5, 6)
    expect_einsum(specs, "batched_matmul", (a, b), a @ b, "a (3, 4, 5), b (3, 5, 6)")
    x, w = rand(2, 7, 5), rand(3, 5)
    expect_einsum(specs, "linear", (x, w), x @ w.T, "x (2, 7, 5), w (3, 5) as nn.Linear(5, 3).weight")
    x, w = rand(2, 4, 6), rand(6, 6)
    expect_einsum(specs, "linear", (x, w), x @ w.T, "x (2, 4, 6), w (6, 6): a square weight (no size error)")
    p, q = rand(7, 3), rand(7, 3)
    expect_einsum(specs, "row_dot", (p, q), np.diag(p @ q.T).copy(), "a (7, 3), b (7, 3)")


@checks("einsum_specs")
def attention_family(ex):
    """attention scores, the output in (B, T, H, D) layout, and GQA scores against matmul and transposes"""
    specs = specs_of(ex)
    B, H, T, S, D = 2, 3, 4, 5, 6
    q, k, v = rand(B, H, T, D), rand(B, H, S, D), rand(B, H, S, D)
    expect_einsum(specs, "attention_scores", (q, k), q @ k.swapaxes(-1, -2), "q (2, 3, 4, 6), k (2, 3, 5, 6)")
    p = rand(B, H, T, S)
    want = (p @ v).transpose(0, 2, 1, 3).copy()
    expect_einsum(specs, "attention_output", (p, v), want, "p (2, 3, 4, 5), v (2, 3, 5, 6) -> (B, T, H, D)")
    G, R = 2, 3
    q, k = rand(B, G, R, T, D), rand(B, G, S, D)
    want = q @ k[:, :, None].swapaxes(-1, -2)  # (B, G, 1, D, S) broadcast over R
    expect_einsum(specs, "gqa_scores", (q, k), want, "q (2, 2, 3, 4, 6), k (2, 2, 5, 6)")
    q, k = rand(1, 4, 4, 4), rand(1, 4, 4, 4)
    expect_einsum(specs, "attention_scores", (q, k), q @ k.swapaxes(-1, -2), "q, k (1, 4, 4, 4): all sizes equal")


@checks("einsum_specs")
def trace_outer_bilinear(ex):
    """trace, outer product and a batched bilinear form against np.trace, np.outer and a float64 loop"""
    specs = specs_of(ex)
    a = rand(5, 5)
    expect_einsum(specs, "trace", (a,), np.array(np.trace(a)), "a (5, 5)")
    u, w = rand(4), rand(6)
    expect_einsum(specs, "outer", (u, w), np.outer(u, w), "a (4,), b (6,)")
    x, m, y = rand(3, 4), rand(4, 5), rand(3, 5)
    loop = np.array([sum(x[b, i] * m[i, j] * y[b, j] for i in range(4) for j in range(5)) for b in range(3)])
    expect_einsum(specs, "bilinear", (x, m, y), loop, "x (3, 4), a (4, 5), y (3, 5)")


@checks("einsum_specs")
def same_strings_work_in_torch(ex):
    """every string also runs in torch.einsum with the same result (letters a-z/A-Z, no spaces needed)"""
    specs = specs_of(ex)
    shapes = {
        "batched_matmul": [(2, 3, 4), (2, 4, 5)],
        "linear": [(2, 3, 4), (5, 4)],
        "attention_scores": [(1, 2, 3, 4), (1, 2, 5, 4)],
        "attention_output": [(1, 2, 3, 5), (1, 2, 5, 4)],
        "gqa_scores": [(1, 2, 3, 4, 6), (1, 2, 5, 6)],
        "trace": [(4, 4)],
        "outer": [(3,), (4,)],
        "bilinear": [(2, 3), (3, 4), (2, 4)],
        "row_dot": [(3, 4), (3, 4)],
    }
    for name, operand_shapes in shapes.items():
        operands = [rand(*s) for s in operand_shapes]
        label = f"{name}: {specs[name]!r} on " + ", ".join(str(s) for s in operand_shapes)
        try:
            got = torch.einsum(specs[name], *[torch.from_numpy(o) for o in operands])
        except RuntimeError as exc:
            expect(False, "torch.einsum refused the string", input=label, got=str(exc)[:120], hint="use letters only")
        expect_close(got, torch.from_numpy(np.asarray(np.einsum(specs[name], *operands))), input=label)


# ------------------------------------------------------------------------------------------ attention_numpy

HINT_ATTENTION = (
    "scores = einsum(q, k) / sqrt(D); masked -> -inf; softmax over the last axis (keys) with the row max "
    "subtracted; einsum with v"
)


def sdpa(q, k, v, mask, dtype=torch.float64):
    t = [torch.from_numpy(a).to(dtype) for a in (q, k, v)]
    m = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    return F.scaled_dot_product_attention(*t, attn_mask=m)


def attention_case(B, H, T, S, D, dtype, scale=1.0):
    q = (scale * rand(B, H, T, D)).astype(dtype)
    k = (scale * rand(B, H, S, D)).astype(dtype)
    v = rand(B, H, S, D).astype(dtype)
    return q, k, v


def compare_attention(ex, q, k, v, mask, label):
    got = ex.attention_numpy(q, k, v, mask)
    expect(
        isinstance(got, np.ndarray),
        "the result is not a NumPy array",
        input=label,
        expected="np.ndarray",
        got=type(got).__name__,
        hint="stay in NumPy: np.einsum, np.where, np.exp",
    )
    got = torch.from_numpy(np.ascontiguousarray(got))
    expect_tensor(got, shape=q.shape, dtype=torch.from_numpy(q).dtype, input=label, hint="return q's dtype")
    baseline = sdpa(q, k, v, mask, dtype=torch.float32) if q.dtype == np.float32 else None
    expect_close(got, sdpa(q, k, v, mask), baseline=baseline, input=label, hint=HINT_ATTENTION)


@checks("attention_numpy")
def one_key_returns_its_value(ex):
    """S = 1: every query attends to the single key with weight 1, so the output is v broadcast over T"""
    q, k, v = attention_case(2, 3, 4, 1, 5, np.float64)
    got = ex.attention_numpy(q, k, v)
    expect_close(
        torch.from_numpy(np.asarray(got)),
        torch.from_numpy(np.broadcast_to(v, q.shape).copy()),
        input="q (2, 3, 4, 5), k, v (2, 3, 1, 5), no mask",
        hint="softmax over the key axis (the last axis of the scores), not over the queries",
    )


@checks("attention_numpy")
def causal_and_padding_masks(ex):
    """float64 and float32, a causal (T, S) mask and a padding (B, 1, 1, S) mask, odd sizes: match SDPA"""
    T = 7
    causal = np.arange(T)[:, None] >= np.arange(T)[None, :]
    lengths = np.array([7, 3])
    padding = np.arange(T)[None, None, None, :] < lengths[:, None, None, None]
    for dtype in (np.float64, np.float32):
        q, k, v = attention_case(2, 3, T, T, 5, dtype)
        for mask, name in ((None, "no mask"), (causal, "causal (7, 7)"), (causal & padding, "causal & padding")):
            compare_attention(ex, q, k, v, mask, describe(q=torch.from_numpy(q)) + f", {name}")
    q, k, v = attention_case(1, 2, 3, 9, 4, np.float32)
    compare_attention(ex, q, k, v, np.ones((1, 9), dtype=bool), "q (1, 2, 3, 4), S = 9, mask (1, 9) all True")


@checks("attention_numpy")
def scale_matters_at_large_head_dim(ex):
    """D = 128, and scaled scores of ~300 in float32 (exp overflows past 88): the scale and the row max matter"""
    q, k, v = attention_case(1, 2, 5, 6, 128, np.float32, scale=3.0)
    compare_attention(ex, q, k, v, None, "q, k (1, 2, 5|6, 128) float32 scaled by 3: raw scores ~ 100")
    q, k, v = attention_case(2, 2, 6, 6, 16, np.float32, scale=10.0)
    causal = np.arange(6)[:, None] >= np.arange(6)[None, :]
    compare_attention(ex, q, k, v, causal, "q, k (2, 2, 6, 16) float32 scaled by 10: scaled scores up to ~300, causal")


@checks("attention_numpy")
def bad_inputs_refused(ex):
    """k, v that do not fit q (also size-1 axes einsum would broadcast), a 3-D q, a mask that does not broadcast"""
    q, k, v = attention_case(2, 3, 4, 5, 6, np.float64)
    cases = [
        ((q, k[..., :4], v, None), "k (2, 3, 5, 4) for D = 6"),
        ((q, k, v[:, :, :3], None), "v (2, 3, 3, 6) for S = 5"),
        ((q, k[:1], v[:1], None), "k, v (1, 3, 5, 6) for B = 2 (np.einsum would broadcast them silently)"),
        ((q, k, v[:, :1], None), "v (2, 1, 5, 6) for H = 3 (one value head: np.einsum would broadcast it)"),
        ((q[0], k, v, None), "q (3, 4, 6): 3-D"),
        ((q, k, v, np.ones((4, 4), dtype=bool)), "mask (4, 4) for scores (2, 3, 4, 5)"),
        ((q, k, v, np.ones((3, 1, 1, 5), dtype=bool)), "mask (3, 1, 1, 5) for B = 2"),
    ]
    for args, label in cases:
        expect_value_error(
            lambda a=args: ex.attention_numpy(*a),
            label,
            "check k, v == (B, H, S, D) and that the mask broadcasts to (B, H, T, S) before computing",
        )
