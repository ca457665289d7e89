"""Checks for p02.kv_cache. References: a plain list-of-tensors cache per row under random workloads;
`F.scaled_dot_product_attention` in float64 on each row's own keys; a tiny Hugging Face `LlamaForCausalLM` decoding
each prompt alone by full recomputation and by `generate(use_cache=True)`; `torch.utils.flop_counter.FlopCounterMode`
on Hugging Face prefill and decode steps with its own `DynamicCache`, bytes from the model's parameters and that
cache's tensors; Llama-3-8B's published shapes by hand."""

import warnings

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_tensor,
    expect_value_error,
    one_thread,
    reference_only,
)
from llm_algo.references.hf import cache_argument, flops_without_rotary_tables, returned_cache, tiny_llama_config
from llm_algo.references.llama import causal_lm

checks = Checks("p02.kv_cache")
checks.restrict(
    "generate_static",
    forbid=["transformers.generation", "transformers.cache_utils"],
    instead="decode with llama_step and your StaticKVCache (transformers' generate and caches are the reference)",
)

# ------------------------------------------------------------------------------------------ StaticKVCache


class ListCache:
    """The oracle: one growing list of (H, D) columns per row."""

    def __init__(self, batch):
        self.rows = [[] for _ in range(batch)]

    def update(self, k, num_new):
        for b in range(k.shape[0]):
            self.rows[b].extend(k[b, :, t] for t in range(int(num_new[b])))

    def reset(self, row):
        self.rows[row] = []

    def stacked(self, row, like):
        if not self.rows[row]:
            return like.new_zeros(like.shape[1], 0, like.shape[3])
        return torch.stack(self.rows[row], dim=1)  # (H, length, D)


@checks("StaticKVCache")
def hand_checkable_writes(ex):
    """2 rows, S_max 5: prefill 2 and 1 real columns, then one decode token each; where every column lands"""
    cache = ex.StaticKVCache(2, 1, 5, 1)
    k = torch.tensor([[[[1.0], [2.0], [9.0]]], [[[5.0], [9.0], [9.0]]]])  # (2, 1, 3, 1): 9 = padding
    keys, values, mask = cache.update(k, -k, torch.tensor([2, 1]))
    label = "k rows [1, 2, pad] and [5, pad, pad], num_new [2, 1], then [3] and [6] with num_new [1, 1]"
    keys, values, mask = cache.update(
        torch.tensor([[[[3.0]]], [[[6.0]]]]), torch.tensor([[[[-3.0]]], [[[-6.0]]]]), torch.tensor([1, 1])
    )
    expect_tensor(keys, shape=(2, 1, 5, 1), dtype=torch.float32, input=label, what="keys")
    expect_tensor(mask, shape=(2, 5), dtype=torch.bool, input=label, what="key_mask")
    got = [keys[0, 0, :3, 0].tolist(), keys[1, 0, :2, 0].tolist()]
    expect(
        got == [[1.0, 2.0, 3.0], [5.0, 6.0]],
        "columns written in the wrong place",
        input=label,
        expected="row 0 columns 0..2 = [1, 2, 3], row 1 columns 0..1 = [5, 6]",
        got=str(got),
        hint="row b writes its num_new[b] real columns at lengths[b], lengths[b] + 1, ... (not at a shared column)",
    )
    expect(
        values[0, 0, :3, 0].tolist() == [-1.0, -2.0, -3.0],
        "values written in the wrong place",
        input=label,
        expected="[-1, -2, -3]",
        got=str(values[0, 0, :3, 0].tolist()),
        hint="write v exactly as k",
    )
    expect(
        cache.lengths.tolist() == [3, 2] and mask.tolist() == [[True] * 3 + [False] * 2, [True] * 2 + [False] * 3],
        "lengths or key mask wrong",
        input=label,
        expected="lengths [3, 2], key_mask True on the first 3 and 2 columns",
        got=f"lengths {cache.lengths.tolist()}, key_mask {mask.int().tolist()}",
        hint="lengths += num_new once per update; key_mask = column < lengths",
    )
    # fill both rows exactly to max_length (row 0 with a padded column left over): allowed
    label = "lengths [3, 2] of 5, then T = 3 with num_new [2, 3]: both rows exactly full"
    cache.update(torch.ones(2, 1, 3, 1), torch.ones(2, 1, 3, 1), torch.tensor([2, 3]))
    expect(
        cache.lengths.tolist() == [5, 5],
        "filling a row exactly to max_length failed",
        input=label,
        expected="lengths [5, 5]",
        got=str(cache.lengths.tolist()),
        hint="a row may hold exactly max_length positions; write only the real columns",
    )
    cache.reset(0), cache.reset(1)
    cache.update(torch.ones(2, 1, 5, 1), torch.ones(2, 1, 5, 1), torch.tensor([4, 5]))
    try:
        cache.update(torch.ones(2, 1, 1, 1), torch.ones(2, 1, 1, 1), torch.tensor([1, 1]))
        message = None
    except ValueError as exc:
        message = str(exc)
    expect(
        message is not None and "row 1" in message and "row 0" not in message,
        "the overflow error does not name the row that overflows",
        input="lengths [4, 5] of 5, one more token each: row 0 becomes exactly full, row 1 overflows",
        expected="a ValueError naming row 1 (as 'row 1')",
        got=repr(message),
        hint="find the rows whose new length exceeds max_length (>, not >=) and name them: 'row 1 ...'",
    )


@checks("StaticKVCache")
def random_workload_matches_a_list_cache(ex):
    """random prefills, decode steps and resets (float32 and bfloat16, GQA shapes): rows equal a list cache's"""
    for batch, heads, head_dim, max_length, dtype in (
        (3, 2, 8, 40, torch.float32),
        (1, 1, 4, 9, torch.bfloat16),
        (4, 4, 6, 30, torch.bfloat16),
    ):
        cache = ex.StaticKVCache(batch, heads, max_length, head_dim, dtype=dtype, device=torch.device("cpu"))
        expect(
            cache.keys.device.type == "cpu" and cache.values.device.type == "cpu",
            "the cache is not on the device it was given",
            input="device=torch.device('cpu')",
            expected="keys and values on cpu",
            got=f"{cache.keys.device}, {cache.values.device}",
            hint="allocate with device=device (a str or a torch.device)",
        )
        key_oracle, value_oracle = ListCache(batch), ListCache(batch)
        storage = (cache.keys.data_ptr(), cache.values.data_ptr())
        lengths = [0] * batch
        label = f"StaticKVCache({batch}, {heads}, {max_length}, {head_dim}, {dtype}), random workload"
        for step in range(12):
            if step % 5 == 4:
                row = int(torch.randint(0, batch, ()))
                cache.reset(row)
                key_oracle.reset(row), value_oracle.reset(row)
                lengths[row] = 0
            width = int(torch.randint(1, 5, ()))
            room = torch.tensor([max_length - n for n in lengths])
            num_new = torch.minimum(torch.randint(0, width + 1, (batch,)), room.clamp_max(width))
            k = torch.randn(batch, heads, width, head_dim).to(dtype)
            v = torch.randn(batch, heads, width, head_dim).to(dtype)
            keys, values, mask = cache.update(k, v, num_new)
            key_oracle.update(k, num_new), value_oracle.update(v, num_new)
            lengths = [n + int(m) for n, m in zip(lengths, num_new, strict=True)]
            expect(
                (keys.data_ptr(), values.data_ptr()) == storage
                and (cache.keys.data_ptr(), cache.values.data_ptr()) == storage,
                "the cache reallocated its buffers",
                input=label + f", step {step}",
                expected="update writes into the buffers allocated in __init__ and returns them",
                got="a different storage",
                hint="assign into self.keys[...] (index assignment), never torch.cat or a new tensor",
            )
            expect(
                cache.lengths.tolist() == lengths,
                "lengths wrong",
                input=label + f", step {step}, num_new {num_new.tolist()}",
                expected=str(lengths),
                got=str(cache.lengths.tolist()),
                hint="advance each row by its own num_new; reset sets one row to 0",
            )
            expect(
                torch.equal(mask, torch.arange(max_length)[None] < torch.tensor(lengths)[:, None]),
                "key_mask wrong",
                input=label + f", step {step}",
                expected="True exactly on columns < lengths[b]",
                got=str(mask.int().tolist()),
                hint="key_mask = arange(S_max) < lengths (after the update)",
            )
            for row in range(batch):
                got_k, got_v = cache.sequence(row)
                for name, got, oracle in (("keys", got_k, key_oracle), ("values", got_v, value_oracle)):
                    want = oracle.stacked(row, k)
                    expect(
                        got.shape == want.shape and torch.equal(got, want),
                        f"sequence({row}) {name} differ from what was written",
                        input=label + f", step {step}",
                        expected=f"{tuple(want.shape)}, the real columns in order",
                        got=f"{tuple(got.shape)}",
                        hint="write only the first num_new[b] columns of row b, at lengths[b] onwards",
                    )


@checks("StaticKVCache")
def refuses_bad_calls_without_writing(ex):
    """overflow, wrong shapes, num_new outside [0, T], a row it does not hold, sizes < 1: ValueError, cache unchanged"""
    cache = ex.StaticKVCache(2, 2, 6, 4)
    cache.update(torch.randn(2, 2, 4, 4), torch.randn(2, 2, 4, 4), torch.tensor([4, 2]))
    before = (cache.keys.clone(), cache.values.clone(), cache.lengths.clone())
    for label, call in (
        (
            "row 0 holds 4 of 6, 3 more",
            lambda: cache.update(torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4), torch.tensor([3, 1])),
        ),
        (
            "k with 3 KV heads for a 2-head cache",
            lambda: cache.update(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4), torch.tensor([1, 1])),
        ),
        (
            "k with head size 5 for 4",
            lambda: cache.update(torch.randn(2, 2, 1, 5), torch.randn(2, 2, 1, 5), torch.tensor([1, 1])),
        ),
        (
            "k for 3 rows, cache of 2",
            lambda: cache.update(torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4), torch.tensor([1, 1, 1])),
        ),
        (
            "num_new 2 > T = 1",
            lambda: cache.update(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4), torch.tensor([2, 0])),
        ),
        ("num_new -1", lambda: cache.update(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4), torch.tensor([1, -1]))),
        (
            "k and v of different shapes",
            lambda: cache.update(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 2, 4), torch.tensor([1, 1])),
        ),
        ("sequence(2) of a 2-row cache", lambda: cache.sequence(2)),
        ("sequence(-1)", lambda: cache.sequence(-1)),
        ("reset(5)", lambda: cache.reset(5)),
    ):
        expect_value_error(call, input=label, hint="validate before writing and raise ValueError naming the row/shape")
        expect(
            all(torch.equal(a, b) for a, b in zip((cache.keys, cache.values, cache.lengths), before, strict=True)),
            "a refused call changed the cache",
            input=label,
            expected="keys, values and lengths as before the call",
            got="changed",
            hint="check everything (including the overflow of every row) before the first write",
        )
    three = ex.StaticKVCache(3, 2, 4, 2)
    three.update(torch.randn(3, 2, 2, 2), torch.randn(3, 2, 2, 2), torch.tensor([2, 2, 2]))
    three.reset(2)
    expect(
        three.lengths.tolist() == [2, 2, 0],
        "reset(2) of a 3-row cache did not free row 2",
        input="StaticKVCache(3, 2, 4, 2), lengths [2, 2, 2], reset(2)",
        expected="[2, 2, 0]",
        got=str(three.lengths.tolist()),
        hint="rows are 0 .. batch_size - 1 (the first dimension of the buffers)",
    )
    expect_value_error(lambda: three.reset(3), input="reset(3) of a 3-row cache", hint="refuse rows outside [0, B)")
    for label, make in (
        ("batch_size 0", lambda: ex.StaticKVCache(0, 2, 6, 4)),
        ("max_length 0", lambda: ex.StaticKVCache(2, 2, 0, 4)),
    ):
        expect_value_error(make, input=label, hint="refuse sizes < 1")


# ------------------------------------------------------------------------------------------ cached_attention


def per_row_reference(q, keys, values, lengths, positions):
    """SDPA in float64 on each row's own written keys; query t sees columns <= positions[b, t] (< lengths[b])."""
    B, H_q, T, D = q.shape
    group = H_q // keys.shape[1]
    out = torch.zeros(B, H_q, T, D, dtype=torch.float64)
    for b in range(B):
        n = int(lengths[b])
        if n == 0:
            continue
        k = keys[b, :, :n].double().repeat_interleave(group, 0)  # (H_q, n, D)
        v = values[b, :, :n].double().repeat_interleave(group, 0)
        allowed = torch.arange(n)[None, :] <= positions[b][:, None]  # (T, n)
        rows = allowed.any(-1)
        if rows.any():
            out[b, :, rows] = F.scaled_dot_product_attention(q[b][:, rows].double(), k, v, attn_mask=allowed[rows])
    return out


def ragged_case(B, H_q, H_kv, T, D, S_max, dtype, poison=None):
    """A cache state after some history plus T new columns; positions = lengths before + t."""
    before = torch.randint(0, S_max - T + 1, (B,))
    num_new = torch.randint(1, T + 1, (B,))
    after = before + num_new
    keys, values = torch.randn(B, H_kv, S_max, D).to(dtype), torch.randn(B, H_kv, S_max, D).to(dtype)
    if poison is not None:
        unwritten = torch.arange(S_max)[None, :] >= after[:, None]  # (B, S_max)
        keys[unwritten[:, None, :, None].expand_as(keys)] = poison
        values[unwritten[:, None, :, None].expand_as(values)] = poison
    q = torch.randn(B, H_q, T, D).to(dtype)
    positions = before[:, None] + torch.arange(T)[None, :]
    mask = torch.arange(S_max)[None, :] < after[:, None]
    return q, keys, values, mask, positions, after, num_new


@checks("cached_attention")
def matches_sdpa_per_row(ex):
    """ragged prefills and decode steps, GQA/MQA/MHA, float32 and bfloat16: SDPA float64 on each row's own keys"""
    for B, H_q, H_kv, T, D, S_max, dtype in (
        (3, 4, 2, 5, 8, 16, torch.float32),
        (2, 4, 1, 1, 16, 11, torch.float32),
        (1, 2, 2, 7, 8, 7, torch.float32),
        (4, 6, 3, 1, 8, 20, torch.bfloat16),
        (2, 4, 2, 3, 8, 9, torch.bfloat16),
    ):
        q, keys, values, mask, positions, after, num_new = ragged_case(B, H_q, H_kv, T, D, S_max, dtype)
        label = describe(q=q, keys=keys) + f", lengths after {after.tolist()}, new {num_new.tolist()}"
        got = ex.cached_attention(q, keys, values, mask, positions)
        expect_tensor(got, shape=q.shape, dtype=dtype, input=label, what="attention output")
        want = per_row_reference(q, keys, values, after, positions)
        real = (torch.arange(T)[None, :] < num_new[:, None])[:, None, :, None].expand_as(want)  # real queries only
        baseline = per_row_reference(q.float(), keys.float(), values.float(), after, positions).to(dtype)
        expect_close(
            got[real],
            want[real],
            baseline=baseline[real],
            input=label,
            hint="visible = key_mask & (column <= query position); GQA: query head h reads KV head h // (H_q // H_kv); "
            "scale by 1/sqrt(D); softmax in float32",
        )


@checks("cached_attention")
def unwritten_slots_never_leak(ex):
    """NaN and 1e4 in the unwritten columns: outputs finite and unchanged; an empty row gives zeros"""
    for poison in (float("nan"), 1e4):
        q, keys, values, mask, positions, after, num_new = ragged_case(3, 4, 2, 2, 8, 12, torch.float32, poison)
        label = describe(q=q, keys=keys) + f", unwritten columns filled with {poison}"
        got = ex.cached_attention(q, keys, values, mask, positions)
        real = (torch.arange(2)[None, :] < num_new[:, None])[:, None, :, None].expand_as(got)
        expect(
            bool(torch.isfinite(got[real]).all()),
            "unwritten cache columns leak into the output",
            input=label,
            expected="finite outputs",
            got=f"{int((~torch.isfinite(got[real])).sum())} non-finite values",
            hint="select with torch.where / masked_fill(-inf) before softmax; 0 * NaN is NaN, so do not multiply",
        )
        expect_close(got[real], per_row_reference(q, keys, values, after, positions)[real], input=label)
    keys, values = torch.randn(2, 1, 4, 8), torch.randn(2, 1, 4, 8)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False]])
    q = torch.randn(2, 2, 1, 8)
    got = ex.cached_attention(q, keys, values, mask, torch.tensor([[1], [0]]))
    expect(
        bool(torch.isfinite(got).all()) and bool((got[1] == 0).all()),
        "an empty row must give zeros",
        input="row 1 has no written column",
        expected="zeros for row 1, no NaN",
        got=str(got[1].flatten()[:4].tolist()),
        hint="softmax over nothing is NaN: replace those rows with 0 (nan_to_num or where)",
    )
    hole_first = torch.tensor([[False, True, True, False], [True, True, False, False]])
    got = ex.cached_attention(q, keys, values, hole_first, torch.tensor([[0], [1]]))
    expect(
        bool((got[0] == 0).all()),
        "a query with no visible key must give zeros",
        input="row 0: key_mask [False, True, True, False], query at position 0 (nothing visible)",
        expected="zeros",
        got=str(got[0].flatten()[:4].tolist()),
        hint="visible = key_mask & (column <= position) is empty here: the output is 0, not an average of others",
    )
    expect_value_error(
        lambda: ex.cached_attention(
            torch.randn(1, 3, 1, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), mask[:1], torch.tensor([[1]])
        ),
        input="3 query heads over 2 KV heads",
        hint="refuse H_q % H_kv != 0",
    )


@checks("cached_attention")
def hand_checkable_single_key(ex):
    """one visible key: the output is its value exactly; the future is invisible during a prefill"""
    keys = torch.randn(1, 1, 3, 4)
    values = torch.tensor([[[[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], [7.0, 7.0, 7.0, 7.0]]]])
    mask = torch.tensor([[True, True, True]])
    q = torch.randn(1, 1, 3, 4)
    got = ex.cached_attention(q, keys, values, mask, torch.tensor([[0, 1, 2]]))
    expect_close(
        got[0, 0, 0],
        values[0, 0, 0].double(),
        input="a 3-token prefill, query at position 0",
        hint="the query at position 0 sees only column 0 (column <= position): its output is value 0 exactly",
    )
    expect(
        not torch.allclose(got[0, 0, 1], got[0, 0, 2]),
        "queries at different positions see the same keys",
        input="a 3-token prefill",
        expected="query 1 sees columns 0-1, query 2 sees 0-2",
        got="equal outputs",
        hint="compare each column with the query's own position",
    )
    holes = torch.tensor([[True, False, True]])  # column 1 evicted: the key mask, not the length, says so
    got = ex.cached_attention(q[:, :, 2:], keys, values, holes, torch.tensor([[2]]))
    allowed = torch.tensor([[True, False, True]])
    want = F.scaled_dot_product_attention(q[0, :, 2:].double(), keys[0].double(), values[0].double(), attn_mask=allowed)
    expect_close(
        got[0],
        want,
        input="query at position 2, key_mask [True, False, True]",
        hint="a key is visible only where key_mask is True AND its column <= the query's position",
    )


# ------------------------------------------------------------------------------------------ generate_static


def reference_model(**overrides):
    with reference_only():
        return causal_lm(tiny_llama_config(**overrides)).eval()


def greedy_by_recomputation(model, prompt, steps):
    with reference_only(), torch.no_grad():
        sequence = prompt[None]
        for _ in range(steps):
            sequence = torch.cat((sequence, model(sequence).logits[:, -1].argmax(-1, keepdim=True)), dim=1)
        return sequence[0, len(prompt) :]


@checks("generate_static")
@one_thread()
def equals_recomputation_per_prompt(ex):
    """prompts of lengths 3, 8, 5 and 1 in one batch: each equals that prompt decoded alone without a cache"""
    torch.manual_seed(0)
    model = reference_model()
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)  # sharper, so that argmax ties are impossible
    prompts = [torch.randint(0, 128, (n,)) for n in (3, 8, 5, 1)]
    steps = 7
    got = ex.generate_static(model, prompts, steps)
    label = "tiny LlamaForCausalLM (2 layers, GQA 4/2), prompt lengths [3, 8, 5, 1], 7 new tokens"
    expect_tensor(got, shape=(4, steps), dtype=torch.int64, input=label, what="tokens")
    for b, prompt in enumerate(prompts):
        want = greedy_by_recomputation(model, prompt, steps)
        expect(
            torch.equal(got[b], want),
            f"prompt {b} (length {len(prompt)}) continues differently from decoding it alone",
            input=label,
            expected=str(want.tolist()),
            got=str(got[b].tolist()),
            hint="take the prefill's token at column len - 1 (not the padded last column); decode at position lengths[b]",
        )


@checks("generate_static")
@one_thread()
def one_prefill_then_one_token_steps(ex):
    """rope_theta 5e5: the model sees one call with the padded batch, then calls of one token per row; equals
    generate(use_cache)"""
    torch.manual_seed(1)
    model = reference_model(num_key_value_heads=4, rope_theta=500000.0)
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)
    shapes = []
    handle = model.model.embed_tokens.register_forward_hook(
        lambda module, args, out: shapes.append(tuple(args[0].shape))
    )
    prompts = [torch.randint(0, 128, (n,)) for n in (6, 2)]
    try:
        got = ex.generate_static(model, prompts, 5, rope_theta=500000.0)
    finally:
        handle.remove()
    label = "tiny LlamaForCausalLM (MHA, rope_theta 5e5), prompt lengths [6, 2], 5 new tokens, rope_theta=500000.0"
    expect(
        shapes == [(2, 6)] + [(2, 1)] * 4,
        "the model was not called as one prefill then one token per step",
        input=label,
        expected="[(2, 6), (2, 1), (2, 1), (2, 1), (2, 1)]",
        got=str(shapes),
        hint="prefill once, then feed only the new token; the last token needs no forward pass",
    )
    for b, prompt in enumerate(prompts):
        with reference_only(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = model.generate(
                prompt[None],
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=False,
                max_new_tokens=5,
                use_cache=True,
                pad_token_id=0,
            )[0, len(prompt) :]
        expect(
            torch.equal(got[b], want),
            f"prompt {b} differs from generate(use_cache=True)",
            input=label,
            expected=str(want.tolist()),
            got=str(got[b].tolist()),
            hint="positions of decode tokens are the cache lengths before the update",
        )


@checks("generate_static")
def refuses_bad_requests(ex):
    """an empty list, an empty prompt, max_new_tokens 0: ValueError"""
    model = reference_model()
    for label, call in (
        ("prompts []", lambda: ex.generate_static(model, [], 3)),
        (
            "an empty prompt",
            lambda: ex.generate_static(model, [torch.tensor([1, 2]), torch.tensor([], dtype=torch.long)], 3),
        ),
        ("max_new_tokens 0", lambda: ex.generate_static(model, [torch.tensor([1, 2])], 0)),
    ):
        expect_value_error(call, input=label, hint="validate the request before building caches")
    got = ex.generate_static(model, [torch.tensor([5])], 1)
    expect(
        torch.equal(got, greedy_by_recomputation(model, torch.tensor([5]), 1)[None]),
        "one token from a one-token prompt is wrong",
        input="prompt [5], max_new_tokens 1",
        expected=str(greedy_by_recomputation(model, torch.tensor([5]), 1).tolist()),
        got=str(got.tolist()),
        hint="the prefill's argmax is the first (here the only) new token",
    )


# ------------------------------------------------------------------------------------------ step_cost


def config_dict(config):
    return {
        name: getattr(config, name)
        for name in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "vocab_size",
        )
    }


@checks("step_cost")
@one_thread()
def flops_match_the_flop_counter(ex):
    """Hugging Face prefill and decode steps (GQA and MHA, with a DynamicCache): FlopCounterMode's exact count"""
    for overrides, batch, past, new in (
        ({}, 2, 0, 7),
        ({}, 3, 9, 1),
        ({"num_key_value_heads": 4, "intermediate_size": 96}, 1, 5, 4),
        ({"num_hidden_layers": 3}, 2, 0, 1),
    ):
        model = reference_model(**overrides)
        with reference_only(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cache = None
            if past:
                cache = returned_cache(model(torch.randint(0, 128, (batch, past)), use_cache=True))
            with FlopCounterMode(display=False) as counter:
                model(torch.randint(0, 128, (batch, new)), **cache_argument(model, cache), use_cache=True)
        want = flops_without_rotary_tables(counter)
        label = f"tiny Llama {overrides or 'default'}, batch {batch}, {past} cached, {new} new"
        got = ex.step_cost(config_dict(model.config), batch, new, past)
        expect(
            isinstance(got, dict) and got.get("flops") == want,
            "FLOPs differ from FlopCounterMode's count",
            input=label,
            expected=f"{want:,}",
            got=str(got.get("flops") if isinstance(got, dict) else got),
            hint="2 per matmul weight per new token (q, k, v, o, gate, up, down in every layer, plus the head) + "
            "2 * 2 * B * H_q * T * S * D per layer for q k^T and p v, S = past + new",
        )


@checks("step_cost")
@one_thread()
def bytes_from_parameters_and_cache(ex):
    """bytes = matmul weights (the model's Linear layers) + every layer's K and V after the step, at 2 and 4 bytes"""
    for overrides, batch, past, new, width in (({}, 2, 6, 1, 2), ({"num_key_value_heads": 1}, 3, 0, 5, 4)):
        model = reference_model(**overrides)
        with reference_only(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cache = returned_cache(model(torch.randint(0, 128, (batch, past + new)), use_cache=True))
            linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
            kv = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers)
        want = width * (linear + kv)
        label = f"tiny Llama {overrides or 'default'}, batch {batch}, {past} cached, {new} new, {width} bytes/element"
        got = ex.step_cost(config_dict(model.config), batch, new, past, bytes_per_element=width)
        expect(
            got["bytes"] == want,
            "bytes differ from the Linear weights plus the cache's K and V",
            input=label,
            expected=f"{want:,} ({width} * ({linear:,} weights + {kv:,} cached K and V elements))",
            got=f"{got['bytes']:,}",
            hint="every matmul weight once (no embedding table), K and V of S = past + new positions in every layer",
        )


@checks("step_cost")
def llama3_8b_by_hand(ex):
    """Llama-3-8B in bf16, decode at batch 1 after 1,023 tokens: 7.50e9 matmul weights, 128 KiB of KV per token"""
    config = dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128256,
    )
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336  # q, o; k, v; gate, up, down
    weights = 32 * per_layer + 4096 * 128256
    kv_bytes = 1024 * 32 * 2 * 8 * 128 * 2  # 128 KiB per token: layers * (K, V) * heads * head_dim * bf16
    got = ex.step_cost(config, 1, 1, 1023)
    want_flops = 2 * weights + 32 * 4 * 32 * 1024 * 128
    label = "Llama-3-8B config, batch 1, 1 new token, 1023 cached, bf16"
    expect(
        got["flops"] == want_flops and got["bytes"] == 2 * weights + kv_bytes,
        "Llama-3-8B decode step differs from the hand count",
        input=label,
        expected=f"flops {want_flops:,}, bytes {2 * weights + kv_bytes:,}",
        got=f"flops {got['flops']:,}, bytes {got['bytes']:,}",
        hint=f"{weights:,} matmul weights; KV of 1,024 positions = {kv_bytes:,} bytes",
    )
    for label, call in (
        ("batch 0", lambda: ex.step_cost(config, 0, 1, 0)),
        ("new_tokens 0", lambda: ex.step_cost(config, 1, 0, 5)),
        ("past_tokens -1", lambda: ex.step_cost(config, 1, 1, -1)),
    ):
        expect_value_error(call, input=label, hint="refuse batch < 1, new_tokens < 1, past_tokens < 0")
