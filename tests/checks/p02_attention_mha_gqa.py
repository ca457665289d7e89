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


class ListCache:
    """The reference: one Python list of (H_kv, n, D) chunks per sequence, concatenated on demand."""

    def __init__(self, batch):
        self.keys, self.values = [[] for _ in range(batch)], [[] for _ in range(batch)]

    def append(self, k, v, num_new):
        for row, count in enumerate(num_new):
            self.keys[row].append(k[row, :, :count].clone())
            self.values[row].append(v[row, :, :count].clone())

    def row(self, b):
        return torch.cat(self.keys[b], dim=1), torch.cat(self.values[b], dim=1)  # (H_kv, n_b, D)

    def lengths(self):
        return [self.row(b)[0].shape[1] for b in range(len(self.keys))]


def expect_matches_lists(cache, k_all, v_all, reference, *, label, dtype, hint):
    """The returned views hold each row's own sequence in its first lengths[b] columns; lengths, length and
    key_mask agree with the reference."""
    lengths = reference.lengths()
    longest = max(lengths)
    batch, heads = len(lengths), reference.keys[0][0].shape[0]
    expect_tensor(
        k_all,
        shape=(batch, heads, longest, reference.keys[0][0].shape[2]),
        dtype=dtype,
        input=label,
        what="returned keys",
        hint="return keys[:, :, :length] with length = max(lengths)",
    )
    expect_tensor(
        v_all,
        shape=(batch, heads, longest, reference.values[0][0].shape[2]),
        dtype=dtype,
        input=label,
        what="returned values",
        hint="return values[:, :, :length] with length = max(lengths)",
    )
    got_lengths = cache.lengths.tolist() if isinstance(cache.lengths, torch.Tensor) else cache.lengths
    expect(
        got_lengths == lengths and cache.length == longest,
        "the lengths do not count each row's real positions",
        input=label,
        expected=f"lengths {lengths}, length {longest}",
        got=f"lengths {got_lengths}, length {cache.length}",
        hint="advance row b by num_new[b] (its real columns), not by S_new; length is the largest row length",
    )
    for b in range(batch):
        keys, values = reference.row(b)
        n = keys.shape[1]
        expect(
            torch.equal(k_all[b, :, :n], keys) and torch.equal(v_all[b, :, :n], values),
            f"row {b} does not hold its own keys and values in order",
            input=label,
            expected=f"row {b}'s {n} positions, equal to the concatenation of its real columns",
            got=f"{int((k_all[b, :, :n] != keys).sum() + (v_all[b, :, :n] != values).sum())} elements differ",
            hint=hint,
        )
    mask = cache.key_mask()
    expected_mask = torch.arange(longest)[None, :] < torch.tensor(lengths)[:, None]
    expect_tensor(
        mask,
        shape=(batch, longest),
        dtype=torch.bool,
        input=label,
        what="key_mask()",
        hint="key_mask() is (B, length) bool",
    )
    expect(
        torch.equal(mask, expected_mask),
        "key_mask() does not mark exactly the written columns",
        input=label,
        expected=f"column j of row b True when j < lengths[b] = {lengths}",
        got=f"{int((mask != expected_mask).sum())} wrong entries, row 0: {mask[0].int().tolist()}",
        hint="arange(length)[None, :] < lengths[:, None] (strictly less: position lengths[b] is not written yet)",
    )


@checks("KVCache")
def uniform_chunks_equal_concatenation(ex):
    """num_new=None: prefill, single tokens and a chunk of 3 return the exact concatenation so far; length counts"""
    k, v = torch.randn(2, 3, 12, 4), torch.randn(2, 3, 12, 4)
    cache = ex.KVCache()
    expect(cache.length == 0, "a new cache is not empty", expected="length 0", got=f"length {cache.length}")
    for start, stop in decode_schedule(12):
        label = f"KVCache(), k, v (2, 3, 12, 4) fed in chunks, this update: positions {start}..{stop - 1}"
        k_all, v_all = cache.update(k[:, :, start:stop].clone(), v[:, :, start:stop].clone())
        expect_tensor(k_all, shape=(2, 3, stop, 4), dtype=k.dtype, input=label, what="returned keys")
        expect_tensor(v_all, shape=(2, 3, stop, 4), dtype=v.dtype, input=label, what="returned values")
        expect(
            torch.equal(k_all, k[:, :, :stop]) and torch.equal(v_all, v[:, :, :stop]),
            "the cache does not hold every key and value so far, in order",
            input=label,
            expected=f"k[:, :, :{stop}] and v[:, :, :{stop}]",
            got="different contents",
            hint="write the new chunk after the positions already cached (at lengths[b]), keys and values apart",
        )
        expect(
            cache.length == stop,
            "length is not the number of cached positions",
            input=label,
            expected=str(stop),
            got=str(cache.length),
            hint="advance by the number of new positions (k.shape[2] when num_new is None), not 1 per call",
        )


@checks("KVCache")
def preallocated_once_and_returns_views(ex):
    """the buffers are (B, H_kv, max_len, D) from the first update on, never reallocated; the results are views"""
    cache = ex.KVCache(max_len=9)
    k, v = torch.randn(2, 2, 9, 3), torch.randn(2, 2, 9, 5)  # D_v != D_k, as MLA caches them
    label = "KVCache(max_len=9), k (2, 2, ·, 3), v (2, 2, ·, 5), updates of 4, 1, 3 positions"
    addresses = None
    for start, stop in ((0, 4), (4, 5), (5, 8)):
        k_all, v_all = cache.update(k[:, :, start:stop], v[:, :, start:stop])
        buffers_ok = (
            isinstance(cache.keys, torch.Tensor)
            and isinstance(cache.values, torch.Tensor)
            and tuple(cache.keys.shape) == (2, 2, 9, 3)
            and tuple(cache.values.shape) == (2, 2, 9, 5)
        )
        expect(
            buffers_ok,
            "keys and values are not preallocated with max_len positions",
            input=label + f", after positions {start}..{stop - 1}",
            expected="cache.keys (2, 2, 9, 3) and cache.values (2, 2, 9, 5)",
            got=f"{getattr(cache.keys, 'shape', cache.keys)} and {getattr(cache.values, 'shape', cache.values)}",
            hint="allocate (B, H_kv, max_len, D) zeros on the first update and write into them in place",
        )
        if addresses is None:
            addresses = (cache.keys.data_ptr(), cache.values.data_ptr())
        expect(
            (cache.keys.data_ptr(), cache.values.data_ptr()) == addresses,
            "the buffers were reallocated",
            input=label + f", after positions {start}..{stop - 1}",
            expected="the same storage as after the first update",
            got="new tensors",
            hint="write into the buffers in place (slice assignment); torch.cat or a fresh tensor copies everything",
        )
        expect(
            k_all.data_ptr() == cache.keys.data_ptr() and v_all.data_ptr() == cache.values.data_ptr(),
            "the returned keys and values are copies, not views of the buffers",
            input=label + f", after positions {start}..{stop - 1}",
            expected="keys[:, :, :length] and values[:, :, :length] (same storage)",
            got="tensors with their own storage",
            hint="return basic slices of the buffers; .clone(), .contiguous() on a strided prefix or torch.cat copy",
        )
        expect(
            torch.equal(k_all, k[:, :, :stop]) and torch.equal(v_all, v[:, :, :stop]),
            "the returned prefix does not hold the positions so far",
            input=label + f", after positions {start}..{stop - 1}",
            expected=f"k[:, :, :{stop}] and v[:, :, :{stop}]",
            got="different contents",
            hint="keys and values may have different head sizes: allocate each from its own input",
        )


RAGGED_CASES = [
    # (B, H_kv, D_k, D_v, max_len, dtype)
    (3, 2, 4, 4, 24, torch.float32),
    (1, 1, 8, 8, 16, torch.float64),
    (4, 2, 6, 3, 20, torch.bfloat16),
    (2, 4, 2, 2, 30, torch.float16),
]


@checks("KVCache")
def ragged_workloads_match_per_sequence_lists(ex):
    """random ragged updates (rows of different lengths, paused rows, chunks) equal a list of tensors per row"""
    for batch, heads, d_k, d_v, max_len, dtype in RAGGED_CASES:
        cache, reference = ex.KVCache(max_len=max_len), ListCache(batch)
        steps = [torch.randint(1, 6, (batch,))] + [None] * 7  # a ragged prefill, then random chunks
        for step, num_new in enumerate(steps):
            width = int(torch.randint(1, 4, ()).item()) if num_new is None else int(num_new.max())
            if num_new is None:
                num_new = torch.randint(0, width + 1, (batch,))
                if step % 3 == 1:
                    num_new = torch.ones(batch, dtype=torch.long)  # a decode step
            if max(reference.lengths() if step else [0]) + width > max_len:
                break
            k = torch.randn(batch, heads, width, d_k).to(dtype)
            v = torch.randn(batch, heads, width, d_v).to(dtype)
            label = (
                f"KVCache(max_len={max_len}), {describe(k=k, v=v)}, update {step}, num_new {num_new.tolist()}, "
                f"lengths before {reference.lengths() if step else [0] * batch}"
            )
            k_all, v_all = cache.update(k.clone(), v.clone(), num_new.clone())
            reference.append(k, v, num_new.tolist())
            expect_matches_lists(
                cache,
                k_all,
                v_all,
                reference,
                label=label,
                dtype=dtype,
                hint="write row b's first num_new[b] columns at positions lengths[b], ... of row b only (its own "
                "length, not the batch's longest), and store k and v unchanged (no cast, no repeat_kv)",
            )


@checks("KVCache")
def ragged_decoding_equals_attention_per_sequence(ex):
    """a right-padded prefill of prompts 6, 2, 4, then decode steps (one row paused): every row equals SDPA over
    that row's own sequence"""
    prompt_lengths, steps = [6, 2, 4], 6
    totals = [n + steps for n in prompt_lengths]
    q = [torch.randn(4, n, 8, dtype=torch.float64) for n in totals]  # (H, n, D) per sequence, GQA 4 / 2
    k = [torch.randn(2, n, 8, dtype=torch.float64) for n in totals]
    v = [torch.randn(2, n, 8, dtype=torch.float64) for n in totals]
    full = [sdpa(q[b][None], k[b][None], v[b][None], causal=True)[0] for b in range(3)]  # (H, n, D) oracle

    def stack(tensors, starts, width):
        out = torch.zeros(3, tensors[0].shape[0], width, 8, dtype=torch.float64)
        for b, (t, s) in enumerate(zip(tensors, starts, strict=True)):
            piece = t[:, s : s + width]
            out[b, :, : piece.shape[1]] = piece
        return out.float()

    caches = [ex.KVCache(max_len=16) for _ in range(2)]  # two layers: no state may be shared between instances
    positions = [0, 0, 0]
    schedule = [prompt_lengths] + [[1, 0 if step in (1, 2) else 1, 1] for step in range(steps)]
    for step, num_new in enumerate(schedule):
        width = max(num_new)
        q_new, k_new, v_new = stack(q, positions, width), stack(k, positions, width), stack(v, positions, width)
        for layer, cache in enumerate(caches):
            k_all, v_all = cache.update(k_new, v_new, torch.tensor(num_new))
            mask = cache.key_mask()
            label = (
                f"3 sequences, prompts {prompt_lengths} right-padded, H_q 4 / H_kv 2, layer {layer}, "
                f"{'prefill' if step == 0 else f'decode step {step}'}, num_new {num_new}"
            )
            expect_tensor(mask, shape=(3, k_all.shape[2]), dtype=torch.bool, input=label, what="key_mask()")
            causal = step == 0  # the prefill starts every row at position 0; a decode step is one query
            out = sdpa(q_new, k_all, v_all, causal=causal, key_padding_mask=mask)  # (3, H, width, D)
            for b in range(3):
                if num_new[b] == 0:
                    continue
                rows = slice(positions[b], positions[b] + num_new[b])
                expect_close(
                    out[b, :, : num_new[b]],
                    full[b][:, rows],
                    input=label + f", row {b} positions {rows.start}..{rows.stop - 1}",
                    hint="attention over the returned prefix with key_mask() must see exactly row b's own keys: "
                    "write each row at its own length, and mask the columns it has not written",
                )
        positions = [p + n for p, n in zip(positions, num_new, strict=True)]


@checks("KVCache")
def refuses_bad_updates_before_writing(ex):
    """max_len < 1, mismatched k/v, a changed batch, heads, head size or dtype, num_new out of range and a write
    past max_len are refused with a ValueError, and leave the cache untouched"""
    for max_len in (0, -3):
        expect_refused(
            lambda max_len=max_len: ex.KVCache(max_len=max_len),
            input=f"KVCache(max_len={max_len})",
            hint="the given __init__ refuses max_len < 1: keep it",
            errors=(ValueError,),
        )
    cache = ex.KVCache(max_len=6)
    first_k, first_v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
    cache.update(first_k, first_v, torch.tensor([2, 3]))  # lengths [2, 3]
    state = (cache.keys.clone(), cache.values.clone(), cache.lengths.clone(), cache.length)

    def random(*shape, dtype=torch.float32):
        return torch.randn(*shape).to(dtype)

    bad = [
        ("k (2, 2, 1, 4) with v (2, 2, 2, 4): different S_new", random(2, 2, 1, 4), random(2, 2, 2, 4), None),
        ("k of 3 dimensions (2, 1, 4)", random(2, 1, 4), random(2, 1, 4), None),
        ("a batch of 3 for a cache of 2 rows", random(3, 2, 1, 4), random(3, 2, 1, 4), None),
        ("4 KV heads for a cache of 2", random(2, 4, 1, 4), random(2, 4, 1, 4), None),
        ("head size 5 for a cache of 4", random(2, 2, 1, 5), random(2, 2, 1, 5), None),
        (
            "float64 k, v for a float32 cache",
            random(2, 2, 1, 4, dtype=torch.float64),
            random(2, 2, 1, 4, dtype=torch.float64),
            None,
        ),
        ("num_new [1, 3] with S_new = 2", random(2, 2, 2, 4), random(2, 2, 2, 4), torch.tensor([1, 3])),
        ("num_new [-1, 1]", random(2, 2, 2, 4), random(2, 2, 2, 4), torch.tensor([-1, 1])),
        ("num_new of 3 rows for a batch of 2", random(2, 2, 1, 4), random(2, 2, 1, 4), torch.tensor([1, 1, 1])),
    ]
    for description, k, v, num_new in bad:
        label = f"KVCache(max_len=6) at lengths [2, 3], update with {description}"
        expect_refused(
            lambda k=k, v=v, num_new=num_new: cache.update(k, v, num_new),
            input=label,
            hint="validate k, v and num_new against the buffers before writing; raise ValueError with the sizes",
            errors=(ValueError,),
        )
        expect_unchanged(cache, state, label)
    # past max_len: row 0 fits exactly (2 + 4 = 6), row 1 does not (3 + 4 = 7 > 6); nothing may be written
    k, v = random(2, 2, 4, 4), random(2, 2, 4, 4)
    label = "KVCache(max_len=6) at lengths [2, 3], update of 4 positions per row: row 0 reaches 6, row 1 would hold 7"
    hint = "check lengths + num_new <= max_len for every row before writing any of them; a ValueError naming the row"
    expect_refused(lambda: cache.update(k, v), input=label, hint=hint, errors=(ValueError,))
    expect_unchanged(cache, state, label)
    try:
        cache.update(k, v)
        message = ""
    except ValueError as error:
        message = str(error)
    expect(
        "row 1" in message.lower(),
        "the refusal does not name the row that would overflow",
        input=label,
        expected="a message naming row 1 (e.g. 'row 1 would hold 7 positions, more than max_len = 6')",
        got=repr(message[:120]),
        hint="name the first row whose lengths + num_new > max_len (strictly: row 0 fills exactly and is fine)",
    )
    k_all, _ = cache.update(k, v, torch.tensor([4, 3]))  # both rows end exactly at max_len: allowed
    expect(
        cache.lengths.tolist() == [6, 6]
        and torch.equal(k_all[0, :, 2:6], k[0])
        and torch.equal(k_all[1, :, 3:6], k[1, :, :3]),
        "a write that ends exactly at max_len is refused or misplaced",
        input="KVCache(max_len=6) at lengths [2, 3], update of num_new [4, 3] (both rows reach 6)",
        expected="lengths [6, 6], row 0's positions 2..5 and row 1's positions 3..5 = the new keys",
        got=f"lengths {cache.lengths.tolist()}",
        hint="a row may hold max_len positions: refuse lengths + num_new > max_len, not >=",
    )


def expect_unchanged(cache, state, label):
    keys, values, lengths, length = state
    same = (
        torch.equal(cache.keys, keys)
        and torch.equal(cache.values, values)
        and torch.equal(cache.lengths, lengths)
        and cache.length == length
    )
    expect(
        same,
        "a refused update changed the cache",
        input=label,
        expected=f"buffers unchanged, lengths {lengths.tolist()}, length {length}",
        got=f"lengths {cache.lengths.tolist()}, length {cache.length}, "
        f"{int((cache.keys != keys).sum() + (cache.values != values).sum())} buffer elements changed",
        hint="validate everything (every row's bound included) before the first write",
    )
