"""Checks for p02.attention_mha_gqa. References: `F.scaled_dot_product_attention` with explicit boolean masks built
here (float64 oracle, and the dtype under test as the tolerance baseline; `enable_gqa` where the installed torch has
it, else `torch.repeat_interleave` in the check), `torch.repeat_interleave` for the head grouping, float64 autograd
through SDPA for the gradients, and hand-derived closed forms (q = 0 gives running means of v)."""

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor
from llm_algo.check.restrictions import ATTENTION

checks = Checks("p02.attention_mha_gqa")
checks.restrict(
    "repeat_kv",
    forbid=[torch.repeat_interleave, torch.Tensor.repeat_interleave],
    instead="insert a group axis, expand it and reshape (torch.repeat_interleave is the reference)",
)
checks.restrict(
    "attention",
    forbid=ATTENTION,
    instead="compute the scores, the mask and the softmax yourself (SDPA is the reference)",
)

LOW_PRECISION = (torch.float16, torch.bfloat16)


# ------------------------------------------------------------------------------------------ references


def allowed_mask(batch, num_queries, num_keys, *, causal, key_padding_mask=None):
    """(B, 1, S_q, S_k) bool, True = query i may see key j: bottom-right causal and/or key padding."""
    allowed = torch.ones(batch, 1, num_queries, num_keys, dtype=torch.bool)
    if causal:
        query_position = torch.arange(num_queries)[:, None] + (num_keys - num_queries)  # absolute positions
        allowed &= torch.arange(num_keys)[None, :] <= query_position
    if key_padding_mask is not None:
        allowed &= key_padding_mask[:, None, None, :]
    return allowed


def sdpa(q, k, v, *, causal=False, key_padding_mask=None):
    """SDPA in q's dtype with an explicit mask; rows with no visible key are zeros (whatever SDPA's version does)."""
    allowed = allowed_mask(q.shape[0], q.shape[2], k.shape[2], causal=causal, key_padding_mask=key_padding_mask)
    group = q.shape[1] // k.shape[1]
    try:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=group > 1)
    except TypeError:  # torch < 2.5 has no enable_gqa: repeat the heads here
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return torch.where(allowed.any(dim=-1, keepdim=True), out, torch.zeros_like(out))


def oracle_and_baseline(q, k, v, **masks):
    with torch.no_grad():
        return sdpa(q.double(), k.double(), v.double(), **masks), sdpa(q, k, v, **masks)


def random_qkv(batch, num_heads, num_kv_heads, num_queries, num_keys, head_dim, dtype=torch.float32, scale=1.0):
    def draw(heads, length):
        return (torch.randn(batch, heads, length, head_dim, dtype=torch.float64) * scale).to(dtype)

    return draw(num_heads, num_queries), draw(num_kv_heads, num_keys), draw(num_kv_heads, num_keys)


def left_padding(lengths, num_keys):
    """(B, S_k) bool with the last lengths[b] positions real (left padding, as batched generation uses)."""
    return torch.arange(num_keys)[None, :] >= (num_keys - torch.tensor(lengths))[:, None]


def call_attention(ex, q, k, v, **masks):
    """The learner's attention on copies, so an in-place write cannot corrupt the references."""
    copies = {name: m.clone() if isinstance(m, torch.Tensor) else m for name, m in masks.items()}
    return ex.attention(q.clone(), k.clone(), v.clone(), **copies)


def compare_with_sdpa(ex, q, k, v, *, label, hint, **masks):
    got = call_attention(ex, q, k, v, **masks)
    expect_tensor(got, shape=q.shape, dtype=q.dtype, input=label, hint="cast the float32 result back to q's dtype")
    oracle, baseline = oracle_and_baseline(q, k, v, **masks)
    expect_close(got, oracle, baseline=baseline, input=label, hint=hint)


GROUPING_HINT = "query head h uses KV head h // (H_q // H_kv): repeat each KV head consecutively (repeat_kv)"
SCALE_HINT = "softmax(q @ k^T / sqrt(D)) @ v, softmax over the key axis"

# (B, H_q, H_kv, S_q, S_k, D): MHA, GQA with group 2 and 4, MQA, a batch of one, one query, odd lengths.
SHAPES = [
    (2, 4, 4, 5, 5, 16),
    (1, 6, 3, 7, 7, 8),
    (3, 8, 2, 1, 9, 32),
    (2, 4, 1, 4, 11, 16),
    (1, 2, 2, 3, 13, 64),
]


# ------------------------------------------------------------------------------------------ repeat_kv


@checks("repeat_kv")
def head_order_by_hand(ex):
    """H_kv = 3 heads holding 0, 1, 2 and n_rep = 2 give heads [0, 0, 1, 1, 2, 2]"""
    x = torch.arange(3.0)[None, :, None, None].expand(1, 3, 2, 4).clone()  # head h is filled with h
    got = ex.repeat_kv(x.clone(), 2)
    label = "x (1, 3, 2, 4), head h filled with the value h, n_rep=2"
    expect_tensor(got, shape=(1, 6, 2, 4), dtype=x.dtype, input=label)
    expect(
        torch.equal(got[0, :, 0, 0], torch.tensor([0.0, 0.0, 1.0, 1.0, 2.0, 2.0])),
        "the repeated heads are in the wrong order",
        input=label,
        expected="heads [0, 0, 1, 1, 2, 2]",
        got=f"heads {got[0, :, 0, 0].tolist()}",
        hint="copies of one KV head are consecutive (repeat_interleave order), not tiled ([0, 1, 2, 0, 1, 2])",
    )


@checks("repeat_kv")
def matches_repeat_interleave(ex):
    """random (B, H_kv, S, D) over n_rep 1, 2, 4, 8 and dtypes equals torch.repeat_interleave(x, n_rep, dim=1)"""
    for shape, n_rep, dtype in [
        ((2, 4, 5, 8), 2, torch.float32),
        ((1, 1, 7, 16), 8, torch.float16),
        ((3, 2, 1, 4), 4, torch.bfloat16),
        ((2, 3, 6, 2), 1, torch.float64),
    ]:
        x = torch.randn(shape).to(dtype)
        label = describe(x=x, n_rep=n_rep)
        got = ex.repeat_kv(x.clone(), n_rep)
        expected = x.repeat_interleave(n_rep, dim=1)
        expect_tensor(got, shape=expected.shape, dtype=dtype, input=label)
        expect(
            torch.equal(got, expected),
            "repeat_kv differs from repeat_interleave",
            input=label,
            expected="an exact copy of head h // n_rep at head h, for every position",
            got=f"{int((got != expected).sum())} of {expected.numel()} elements differ",
            hint="add the group axis right after the head axis (x[:, :, None]), expand it, then reshape; "
            "adding it elsewhere mixes positions or tiles the heads",
        )


@checks("repeat_kv")
def gradient_sums_over_the_group(ex):
    """float64 gradient: each KV head receives the sum of the gradients of its n_rep copies"""
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 6, 4, 5, dtype=torch.float64)
    ex.repeat_kv(x, 2).backward(upstream)
    expected = upstream.view(2, 3, 2, 4, 5).sum(dim=2)
    expect(x.grad is not None, "no gradient reached x", input=describe(x=x), hint="use differentiable ops only")
    expect_close(
        x.grad,
        expected,
        input=describe(x=x, n_rep=2),
        what="gradient of x",
        hint="head h of the output must be a copy of input head h // n_rep, so gradients add up per group",
    )


# ------------------------------------------------------------------------------------------ attention


@checks("attention")
def zero_queries_give_running_means(ex):
    """q = 0: every score is 0, so causal attention returns the running mean of v (hand-checkable)"""
    torch.manual_seed(1)
    v = torch.randn(1, 1, 4, 2)
    q, k = torch.zeros(1, 1, 4, 2), torch.randn(1, 1, 4, 2)
    expected = v.double().cumsum(dim=2) / torch.arange(1, 5, dtype=torch.float64)[:, None]
    expect_close(
        call_attention(ex, q, k, v, causal=True),
        expected,
        input="q = 0 (1, 1, 4, 2), random k and v, causal=True",
        hint="with equal scores, query i averages v[0..i]: the causal mask must allow keys j <= i",
    )
    q_last = torch.zeros(1, 1, 2, 2)  # the last two queries of the same sequence, as a KV cache would ask
    expect_close(
        call_attention(ex, q_last, k, v, causal=True),
        expected[:, :, 2:],
        input="q = 0 (1, 1, 2, 2) over 4 keys, causal=True: the queries are positions 2 and 3",
        hint="bottom-right alignment: query i sits at position S_k - S_q + i (tril with diagonal=S_k - S_q)",
    )


@checks("attention")
def matches_sdpa_mha_gqa_mqa(ex):
    """no mask, MHA, GQA (group 2, 4), MQA, S_q != S_k, D = 8..64 match SDPA"""
    for batch, h_q, h_kv, s_q, s_k, head_dim in SHAPES:
        q, k, v = random_qkv(batch, h_q, h_kv, s_q, s_k, head_dim)
        label = describe(q=q, k=k, v=v)
        compare_with_sdpa(ex, q, k, v, label=label, hint=f"{SCALE_HINT}; {GROUPING_HINT}")


@checks("attention")
def causal_bottom_right(ex):
    """causal=True with S_q = S_k (prefill), S_q < S_k (a chunk after a cache) and S_q = 1 (decoding)"""
    for batch, h_q, h_kv, s_q, s_k, head_dim in [(2, 4, 2, 6, 6, 16), (1, 4, 4, 3, 10, 8), (3, 8, 2, 1, 7, 16)]:
        q, k, v = random_qkv(batch, h_q, h_kv, s_q, s_k, head_dim)
        label = describe(q=q, k=k, v=v, causal=True) + f": queries at positions {s_k - s_q}..{s_k - 1}"
        compare_with_sdpa(
            ex,
            q,
            k,
            v,
            causal=True,
            label=label,
            hint="query i may see keys j <= S_k - S_q + i (bottom-right), including itself; SDPA's is_causal is "
            "top-left (j <= i), which is wrong when S_q != S_k",
        )


@checks("attention")
def padding_masks(ex):
    """key_padding_mask: left and right padding, with and without causal, match SDPA with the same mask"""
    q, k, v = random_qkv(3, 4, 2, 6, 6, 16)
    for causal in (False, True):
        mask = left_padding([6, 4, 1], 6)
        compare_with_sdpa(
            ex,
            q,
            k,
            v,
            causal=causal,
            key_padding_mask=mask,
            label=describe(q=q, k=k) + f", left padding, real lengths [6, 4, 1], causal={causal}",
            hint="key_padding_mask (B, S_k) hides keys: broadcast it as mask[:, None, None, :] (not over queries)",
        )
    q, k, v = random_qkv(2, 2, 1, 3, 8, 8)
    mask = torch.arange(8)[None, :] < torch.tensor([[8], [5]])  # right padding
    compare_with_sdpa(
        ex,
        q,
        k,
        v,
        key_padding_mask=mask,
        label=describe(q=q, k=k) + ", right padding, real lengths [8, 5], MQA",
        hint="True in key_padding_mask means a real token that may be attended to",
    )


@checks("attention")
def rows_with_no_visible_key(ex):
    """left padding + causal: a query that may see no key returns exact zeros, and no gradient is NaN"""
    q, k, v = (t.requires_grad_() for t in random_qkv(2, 2, 2, 5, 5, 8, dtype=torch.float64))
    mask = left_padding([5, 3], 5)  # row 1: queries 0 and 1 are padding and may see only padding keys
    label = describe(q=q, k=k) + ", left padding lengths [5, 3], causal=True: row 1, queries 0-1 see no key"
    got = ex.attention(q, k, v, causal=True, key_padding_mask=mask)
    expect_tensor(got, shape=q.shape, dtype=torch.float64, input=label)
    empty_rows = got[1, :, :2]
    expect(
        bool(torch.isfinite(empty_rows).all()) and bool((empty_rows == 0).all()),
        "a query with no visible key does not return zeros",
        input=label,
        expected="zeros for row 1, queries 0 and 1",
        got=f"{empty_rows[0, :, :3].tolist()}",
        hint="masked_fill(-inf) + softmax gives NaN (0/0) here, and a large negative number instead of -inf gives "
        "a uniform average of the padding; zero the rows that have no allowed key",
    )
    oracle = sdpa(q.detach(), k.detach(), v.detach(), causal=True, key_padding_mask=mask)
    expect_close(got, oracle, input=label, hint="the rows that do see keys must still match SDPA")
    got.backward(torch.randn_like(got))
    bad = [name for name, t in (("q", q), ("k", k), ("v", v)) if t.grad is None or not torch.isfinite(t.grad).all()]
    expect(
        not bad,
        "gradients are missing or not finite",
        input=label,
        expected="finite gradients for q, k and v",
        got=f"NaN, inf or None in the gradient of {', '.join(bad)}",
        hint="no NaN may appear in any intermediate: a NaN in the forward pass poisons the backward even when the "
        "output is masked away afterwards",
    )


@checks("attention")
def one_token_at_a_time_equals_full(ex):
    """decoding: query t over keys 0..t (S_q = 1, causal=True) equals row t of full causal attention"""
    q, k, v = random_qkv(2, 4, 2, 7, 7, 16)
    full = call_attention(ex, q, k, v, causal=True)
    for t in range(7):
        step = call_attention(ex, q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1], causal=True)
        label = describe(q=q[:, :, t : t + 1], k=k[:, :, : t + 1]) + f", causal=True (decoding step {t})"
        oracle, baseline = oracle_and_baseline(q, k, v, causal=True)
        expect_close(
            step,
            oracle[:, :, t : t + 1],
            baseline=baseline[:, :, t : t + 1],
            input=label,
            hint="a single query at the end of the sequence must see every key: align the causal mask "
            "bottom-right (diagonal = S_k - S_q)",
        )
    expect_close(full, oracle, baseline=baseline, input=describe(q=q, k=k, causal=True), hint=SCALE_HINT)


@checks("attention")
def half_precision(ex):
    """fp16 and bf16 with large scores, GQA, causal + padding: softmax in float32, result in the input dtype"""
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = random_qkv(2, 4, 2, 9, 9, 64, dtype=dtype, scale=2.5)
        mask = left_padding([9, 6], 9)
        compare_with_sdpa(
            ex,
            q,
            k,
            v,
            causal=True,
            key_padding_mask=mask,
            label=describe(q=q, k=k) + ", scale 2.5, causal, left padding [9, 6]",
            hint="compute the scores, the softmax and P @ V in float32, then cast the output back to q's dtype",
        )
        q, k, v = random_qkv(2, 4, 2, 9, 32, 128, dtype=dtype, scale=4.0)  # peaked softmax rows, long rows
        compare_with_sdpa(
            ex,
            q,
            k,
            v,
            label=describe(q=q, k=k) + ", scale 4 (peaked softmax), no mask",
            hint="compute the scores, the softmax and P @ V in float32: in fp16/bf16 every probability is rounded",
        )


@checks("attention")
def large_scores_stay_finite(ex):
    """float32 scores of several hundred (exp overflows at 89): subtract each row's max before exp"""
    q, k, v = random_qkv(2, 4, 2, 6, 10, 16, scale=8.0)  # scores ~ N(0, 64**2)
    mask = left_padding([10, 7], 10)
    compare_with_sdpa(
        ex,
        q,
        k,
        v,
        causal=True,
        key_padding_mask=mask,
        label=describe(q=q, k=k) + ", scale 8 (scores up to ~250), causal, left padding [10, 7]",
        hint="softmax(s) = exp(s - max s) / sum exp(s - max s): without the max, exp(250) is inf and inf / inf nan",
    )


def gradients_of(fn, upstream, *tensors):
    """Gradients of fn(*tensors) with respect to each tensor, for the given upstream gradient."""
    leaves = [t.clone().requires_grad_() for t in tensors]
    fn(*leaves).backward(upstream)
    return [leaf.grad for leaf in leaves]


@checks("attention")
def gradients_match_sdpa(ex):
    """float64 gradients of q, k, v (GQA, causal, S_q < S_k, padding) match autograd through SDPA"""
    q, k, v = random_qkv(2, 4, 2, 4, 6, 8, dtype=torch.float64)
    mask = left_padding([6, 5], 6)
    upstream = torch.randn(2, 4, 4, 8, dtype=torch.float64)
    got = gradients_of(lambda *t: ex.attention(*t, causal=True, key_padding_mask=mask), upstream, q, k, v)
    expected = gradients_of(lambda *t: sdpa(*t, causal=True, key_padding_mask=mask), upstream, q, k, v)
    label = describe(q=q, k=k, v=v) + ", causal, left padding [6, 5]"
    for name, grad, reference in zip("qkv", got, expected, strict=True):
        expect(grad is not None, f"no gradient reached {name}", input=label, hint="use differentiable ops only")
        expect_close(
            grad,
            reference,
            input=label,
            what=f"gradient of {name}",
            hint="the forward pass must be differentiable end to end (no .detach(), no in-place writes into "
            "tensors autograd needs); a KV head's gradient sums over its query heads",
        )


@checks("attention")
def refuses_bad_head_counts(ex):
    """H_q = 6 with H_kv = 4, or fewer query heads than KV heads, is refused instead of a silent wrong grouping"""
    for num_heads, num_kv_heads in ((6, 4), (1, 2)):
        q, k, v = random_qkv(1, num_heads, num_kv_heads, 3, 3, 8)
        expect_refused(
            lambda q=q, k=k, v=v: ex.attention(q, k, v),
            input=describe(q=q, k=k)
            + f" ({num_heads} query heads cannot be split into groups over {num_kv_heads} KV heads)",
            hint="raise ValueError when H_q % H_kv != 0",
        )


# ------------------------------------------------------------------------------------------ KVCache


def decode_schedule(total):
    """Prefill 5 positions, then single tokens, a chunk of 3, single tokens: (start, stop) slices."""
    bounds = [0, 5, 6, 7, 10, 11, total]
    return list(zip(bounds, bounds[1:], strict=False))


@checks("KVCache")
def appends_along_the_sequence(ex):
    """update returns the exact concatenation of everything so far, and length counts positions"""
    k, v = torch.randn(2, 3, 12, 4), torch.randn(2, 3, 12, 4)
    cache = ex.KVCache()
    expect(cache.length == 0, "a new cache is not empty", expected="length 0", got=f"length {cache.length}")
    for start, stop in decode_schedule(12):
        label = f"k, v (2, 3, 12, 4) fed in chunks, this update: positions {start}..{stop - 1}"
        k_all, v_all = cache.update(k[:, :, start:stop].clone(), v[:, :, start:stop].clone())
        expect_tensor(k_all, shape=(2, 3, stop, 4), dtype=k.dtype, input=label, what="returned keys")
        expect_tensor(v_all, shape=(2, 3, stop, 4), dtype=v.dtype, input=label, what="returned values")
        expect(
            torch.equal(k_all, k[:, :, :stop]) and torch.equal(v_all, v[:, :, :stop]),
            "the cache does not hold every key and value so far, in order",
            input=label,
            expected=f"k[:, :, :{stop}] and v[:, :, :{stop}]",
            got="different contents",
            hint="append the new chunk after the old ones along dim 2 and keep keys and values separate",
        )
        expect(
            cache.length == stop,
            "length is not the number of cached positions",
            input=label,
            expected=str(stop),
            got=str(cache.length),
            hint="add the number of new positions (k.shape[2]), not 1 per call",
        )


@checks("KVCache")
def decoding_equals_full_attention(ex):
    """prefill, single tokens and a chunk through the cache: each step's SDPA output equals full causal attention"""
    q, k, v = random_qkv(2, 8, 2, 14, 14, 16)
    full = sdpa(q.double(), k.double(), v.double(), causal=True)
    caches = [ex.KVCache() for _ in range(2)]  # two layers, to catch state shared between instances
    for start, stop in decode_schedule(14):
        for layer, cache in enumerate(caches):
            k_all, v_all = cache.update(k[:, :, start:stop], v[:, :, start:stop])
            step = sdpa(q[:, :, start:stop], k_all, v_all, causal=True)
            label = f"q, k, v (2, 8 / 2, 14, 16), layer {layer}, step over positions {start}..{stop - 1}"
            expect_tensor(k_all, shape=(2, 2, stop, 16), input=label, what="returned keys")
            expect_close(
                step,
                full[:, :, start:stop],
                baseline=sdpa(q, k, v, causal=True)[:, :, start:stop],
                input=label,
                hint="the cache must return all positions so far (keys and values of the same positions); "
                "each KVCache instance keeps its own tensors",
            )


@checks("KVCache")
def keeps_dtype_and_batch_rows(ex):
    """fp16 and bf16 caches keep the dtype, the KV head count and each batch row's own keys"""
    for dtype in LOW_PRECISION:
        k, v = torch.randn(3, 2, 6, 8).to(dtype), torch.randn(3, 2, 6, 8).to(dtype)
        cache = ex.KVCache()
        cache.update(k[:, :, :4], v[:, :, :4])
        k_all, v_all = cache.update(k[:, :, 4:], v[:, :, 4:])
        label = describe(k=k) + ", two updates of 4 and 2 positions"
        expect_tensor(k_all, shape=k.shape, dtype=dtype, input=label, what="returned keys")
        expect(
            torch.equal(k_all, k) and torch.equal(v_all, v),
            "the cached tensors differ from the inputs",
            input=label,
            expected="k and v unchanged, batch rows and heads in place",
            got=f"{int((k_all != k).sum() + (v_all != v).sum())} elements differ",
            hint="store H_kv heads as given (no repeat_kv before the cache, no casting)",
        )
