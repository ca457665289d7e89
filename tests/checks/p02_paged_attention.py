"""Checks for p02.paged_attention. References: a set-based model of the allocator (free set + counts) driven by
thousands of random operations; per-sequence contiguous token lists (the oracle of the cache) under random appends,
forks and frees, with the invariant count(block) == number of block tables listing it; and
`F.scaled_dot_product_attention` (float64 oracle, low-precision baseline) over the same keys and values laid out
contiguously, with NaN planted in every cache slot a correct reader never touches."""

import random

import torch
import torch.nn.functional as F

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    expect_tensor,
    expect_value_error,
    reference_only,
)
from llm_algo.check.restrictions import ATTENTION

checks = Checks("p02.paged_attention")
checks.restrict(
    "paged_decode_attention",
    forbid=ATTENTION,
    instead="gather the blocks and compute softmax(q k^T * scale) v yourself (SDPA is the checks' reference)",
)


# ------------------------------------------------------------------------------------------ allocator


def refuses(call, label, hint, errors=(ValueError,)):
    expect_refused(call, label, hint, errors=errors)


@checks("block_allocator")
def small_pool_by_hand(ex):
    """a pool of 3: three distinct ids, the fourth allocate raises, a freed block comes back, counts follow incref"""
    alloc = ex.BlockAllocator(3)
    expect(
        alloc.num_free() == 3,
        "a new pool is not all free",
        input="BlockAllocator(3)",
        expected="3",
        got=str(alloc.num_free()),
    )
    ids = [alloc.allocate() for _ in range(3)]
    expect(
        sorted(ids) == [0, 1, 2],
        "allocate() must hand out each block of the pool once",
        input="BlockAllocator(3), 3 x allocate()",
        expected="ids {0, 1, 2} in some order",
        got=str(ids),
    )
    expect(
        alloc.num_free() == 0,
        "num_free after 3 allocations",
        input="BlockAllocator(3)",
        expected="0",
        got=str(alloc.num_free()),
    )
    refuses(
        alloc.allocate, "4th allocate() of a pool of 3", "raise RuntimeError when no block is free", (RuntimeError,)
    )
    alloc.incref(ids[1])
    expect(
        alloc.refcount(ids[1]) == 2,
        "incref did not count",
        input="allocate, incref",
        expected="2",
        got=str(alloc.refcount(ids[1])),
    )
    alloc.free(ids[1])
    expect(
        alloc.num_free() == 0 and alloc.refcount(ids[1]) == 1,
        "a block still held by one owner was returned to the pool",
        input="allocate, incref, free",
        expected="refcount 1, num_free 0",
        got=f"refcount {alloc.refcount(ids[1])}, num_free {alloc.num_free()}",
        hint="free() returns the block only when its count reaches 0",
    )
    alloc.free(ids[1])
    again = alloc.allocate()
    expect(
        again == ids[1],
        "the only free block was not handed out again",
        input="allocate, incref, free, free, allocate",
        expected=str(ids[1]),
        got=str(again),
        hint="free() puts the block back on the free list when its count reaches 0",
    )


@checks("block_allocator")
def random_workload_invariants(ex):
    """3000 random allocate/incref/free operations against a set-based model: no leak, no block handed out twice"""
    rng = random.Random(1234)
    for num_blocks in (1, 7, 32):
        alloc = ex.BlockAllocator(num_blocks)
        counts = [0] * num_blocks  # the model
        history = []
        for step in range(1000):
            op = rng.random()
            held = [b for b in range(num_blocks) if counts[b] > 0]
            label = f"BlockAllocator({num_blocks}), step {step}, last ops {history[-4:]}"
            if op < 0.45:
                if len(held) == num_blocks:
                    refuses(
                        alloc.allocate, label + ", pool full", "RuntimeError when the pool is empty", (RuntimeError,)
                    )
                    history.append("allocate -> RuntimeError")
                    continue
                block = alloc.allocate()
                expect(
                    isinstance(block, int) and 0 <= block < num_blocks and counts[block] == 0,
                    "allocate() handed out a block that is still in use (or outside the pool)",
                    input=label,
                    expected=f"one of the free blocks {[b for b in range(num_blocks) if counts[b] == 0]}",
                    got=repr(block),
                    hint="a block returns to the free list only when its count reaches 0, and only once",
                )
                counts[block] = 1
                history.append(f"allocate -> {block}")
            elif op < 0.6 and held:
                block = rng.choice(held)
                alloc.incref(block)
                counts[block] += 1
                history.append(f"incref {block}")
            elif held:
                block = rng.choice(held)
                alloc.free(block)
                counts[block] -= 1
                history.append(f"free {block}")
            else:
                continue
            free_now = counts.count(0)
            expect(
                alloc.num_free() == free_now,
                "num_free() disagrees with the blocks nobody holds (a leak or a double hand-out)",
                input=label,
                expected=str(free_now),
                got=str(alloc.num_free()),
                hint="free list <=> count 0: push on the last free only, pop on allocate",
            )
        got = [alloc.refcount(b) for b in range(num_blocks)]
        expect(
            got == counts,
            "reference counts disagree with the model",
            input=f"BlockAllocator({num_blocks}) after 1000 ops",
            expected=str(counts),
            got=str(got),
        )


@checks("block_allocator")
def refuses_bad_ids_and_double_free(ex):
    """ValueError for ids outside the pool (block table past its pool), a double free, incref of a free block"""
    alloc = ex.BlockAllocator(4)
    block = alloc.allocate()
    refuses(lambda: alloc.free(4), "free(4) on a pool of 4", "ids are 0 .. num_blocks - 1")
    refuses(lambda: alloc.free(-1), "free(-1)", "a negative id is outside the pool")
    refuses(lambda: alloc.incref(9), "incref(9) on a pool of 4", "ids are 0 .. num_blocks - 1")
    free_block = next(b for b in range(4) if b != block)
    refuses(
        lambda: alloc.incref(free_block), f"incref({free_block}) of a free block", "only allocated blocks gain holders"
    )
    alloc.free(block)
    refuses(lambda: alloc.free(block), f"free({block}) twice", "a double free must raise, not push the block twice")
    expect(
        alloc.num_free() == 4,
        "a refused call changed the pool",
        input="double free refused",
        expected="4 free",
        got=str(alloc.num_free()),
    )


# ------------------------------------------------------------------------------------------ paged cache


def tokens(n, heads=2, dim=3, dtype=torch.float32):
    return torch.randn(n, heads, dim).to(dtype), torch.randn(n, heads, dim).to(dtype)


def expect_sequence(cache, seq_id, want_k, want_v, label):
    keys, values = cache.gather(seq_id)
    expect_tensor(keys, shape=want_k.shape, dtype=want_k.dtype, input=label, what=f"gather({seq_id}) keys")
    for name, got, want in (("keys", keys, want_k), ("values", values, want_v)):
        expect(
            torch.equal(got, want),
            f"sequence {seq_id}: gathered {name} differ from the tokens appended",
            input=label,
            expected=f"{tuple(want.shape)} equal to the appended {name}",
            got=f"{int((got != want).any(-1).any(-1).sum())} positions differ"
            if got.shape == want.shape
            else str(tuple(got.shape)),
            hint="token p lives in block table[p // block_size], slot p % block_size; copy-on-write before writing a shared block",
        )


def expect_invariants(cache, label):
    bs = cache.block_size
    holders = {}
    for seq_id, table in cache.block_tables.items():
        length = cache.lengths[seq_id]
        expect(
            len(table) == -(-length // bs),
            f"sequence {seq_id}: its table has the wrong number of blocks",
            input=label,
            expected=f"ceil({length} / {bs}) = {-(-length // bs)}",
            got=str(len(table)),
            hint="allocate a block only when the last one is full (ceil division)",
        )
        for block in table:
            holders[block] = holders.get(block, 0) + 1
    alloc = cache.allocator
    counts = {b: alloc.refcount(b) for b in range(alloc.num_blocks) if alloc.refcount(b) or b in holders}
    expect(
        counts == holders,
        "reference counts differ from the number of block tables that list each block",
        input=label,
        expected=str(dict(sorted(holders.items()))),
        got=str(dict(sorted(counts.items()))),
        hint="fork increfs every block; copy-on-write frees the shared block once; free_sequence frees each block",
    )
    expect(
        alloc.num_free() == alloc.num_blocks - len(holders),
        "blocks leaked: neither free nor held by any sequence",
        input=label,
        expected=str(alloc.num_blocks - len(holders)),
        got=str(alloc.num_free()),
    )


@checks("paged_kv_cache")
def append_and_gather_by_hand(ex):
    """block_size 4: 6 tokens use 2 blocks, 2 more fill the second, a 9th opens a third; gather returns them in order"""
    cache = ex.PagedKVCache(num_blocks=5, block_size=4, num_kv_heads=2, head_dim=3)
    cache.add_sequence(7)
    k1, v1 = tokens(6)
    cache.append(7, k1, v1)
    label = "PagedKVCache(5 blocks of 4), append 6 tokens"
    expect(
        len(cache.block_tables[7]) == 2,
        "6 tokens in blocks of 4 need 2 blocks",
        input=label,
        expected="2",
        got=str(cache.block_tables[7]),
    )
    expect_sequence(cache, 7, k1, v1, label)
    k2, v2 = tokens(2)
    cache.append(7, k2, v2)
    expect(
        len(cache.block_tables[7]) == 2,
        "8 tokens still fit in 2 blocks",
        input=label + ", then 2",
        expected="2 blocks",
        got=str(cache.block_tables[7]),
    )
    k3, v3 = tokens(1)
    cache.append(7, k3, v3)
    label += ", then 2, then 1"
    expect_sequence(cache, 7, torch.cat([k1, k2, k3]), torch.cat([v1, v2, v3]), label)
    expect_invariants(cache, label)
    cache.free_sequence(7)
    expect(
        cache.allocator.num_free() == 5,
        "free_sequence did not return the blocks",
        input=label + ", free",
        expected="5",
        got=str(cache.allocator.num_free()),
    )


@checks("paged_kv_cache")
def fork_shares_and_copies_on_write(ex):
    """fork mid-block: full blocks shared (count 2), the partial block copied on the first write, parent untouched"""
    for prefix in (6, 8):  # mid-block, and exactly at a block boundary (no copy needed)
        cache = ex.PagedKVCache(num_blocks=8, block_size=4, num_kv_heads=2, head_dim=3, dtype=torch.float64)
        expect(
            cache.key_cache.dtype == torch.float64 and cache.value_cache.dtype == torch.float64,
            "the cache is not of the dtype it was given",
            input="PagedKVCache(8 blocks of 4, dtype=torch.float64)",
            expected="key_cache and value_cache float64",
            got=f"{cache.key_cache.dtype}, {cache.value_cache.dtype}",
            hint="allocate the blocks with dtype=dtype",
        )
        cache.add_sequence(0)
        k0, v0 = tokens(prefix, dtype=torch.float64)
        cache.append(0, k0, v0)
        cache.fork(0, 1)
        label = f"block_size 4, parent of {prefix} tokens forked into child 1"
        expect(
            cache.block_tables[1] == cache.block_tables[0] and cache.allocator.num_free() == 6,
            "fork must share the parent's blocks without allocating",
            input=label,
            expected=f"child table == parent table {cache.block_tables[0]}, 6 blocks free",
            got=f"child {cache.block_tables[1]}, {cache.allocator.num_free()} free",
        )
        expect_invariants(cache, label)
        kc, vc = tokens(3, dtype=torch.float64)
        cache.append(1, kc, vc)  # the child writes first: copy-on-write when the last block is partly full
        kp, vp = tokens(1, dtype=torch.float64)
        cache.append(0, kp, vp)
        label += ", child appends 3, parent appends 1"
        expect_sequence(cache, 0, torch.cat([k0, kp]), torch.cat([v0, vp]), label)
        expect_sequence(cache, 1, torch.cat([k0, kc]), torch.cat([v0, vc]), label)
        expect_invariants(cache, label)
        shared = sum(1 for b in cache.block_tables[1] if b in cache.block_tables[0])
        expect(
            shared == prefix // 4,
            "the full prefix blocks must stay shared, the partial one must not",
            input=label,
            expected=f"{prefix // 4} shared block(s)",
            got=f"{shared}: parent {cache.block_tables[0]}, child {cache.block_tables[1]}",
            hint="copy only a shared block that is partly full; a full shared block is never written again",
        )
        cache.free_sequence(0)
        cache.free_sequence(1)
        expect(
            cache.allocator.num_free() == 8,
            "blocks leaked after freeing both sequences",
            input=label,
            expected="8",
            got=str(cache.allocator.num_free()),
        )


@checks("paged_kv_cache")
def random_workload_against_contiguous_lists(ex):
    """1500 random appends, forks and frees (tight pool): contents, counts, table sizes and all-or-nothing appends"""
    rng = random.Random(99)
    cache = ex.PagedKVCache(num_blocks=24, block_size=3, num_kv_heads=1, head_dim=2)
    oracle_k, oracle_v = {}, {}
    next_id = 0
    for step in range(1500):
        op = rng.random()
        live = sorted(oracle_k)
        label = f"PagedKVCache(24 blocks of 3), random workload, step {step}"
        if op < 0.15 or not live:
            cache.add_sequence(next_id)
            oracle_k[next_id], oracle_v[next_id] = torch.zeros(0, 1, 2), torch.zeros(0, 1, 2)
            next_id += 1
        elif op < 0.7:
            seq = rng.choice(live)
            k, v = tokens(rng.randint(1, 5), heads=1, dim=2)
            free_before = cache.allocator.num_free()
            tables_before = {s: list(t) for s, t in cache.block_tables.items()}
            try:
                cache.append(seq, k, v)
            except RuntimeError:
                expect(
                    cache.allocator.num_free() == free_before
                    and cache.block_tables == tables_before
                    and cache.lengths[seq] == len(oracle_k[seq]),
                    "a refused append changed the cache",
                    input=label + f", append {k.shape[0]} tokens to {seq} with {free_before} blocks free",
                    expected="no change (count the blocks first, then allocate)",
                    got=f"{cache.allocator.num_free()} free, length {cache.lengths[seq]}",
                    hint="check that the allocator can supply every block (and the copy) before changing anything",
                )
                length = len(oracle_k[seq])
                needed = -(-(length + k.shape[0]) // 3) - len(tables_before[seq])
                copy = length % 3 != 0 and cache.allocator.refcount(tables_before[seq][-1]) > 1
                expect(
                    needed + copy > free_before,
                    "append raised although the pool had enough blocks",
                    input=label,
                    expected=f"success: {needed} new block(s) + {int(copy)} copy, {free_before} free",
                    got="RuntimeError",
                )
                continue
            oracle_k[seq], oracle_v[seq] = torch.cat([oracle_k[seq], k]), torch.cat([oracle_v[seq], v])
        elif op < 0.82:
            parent = rng.choice(live)
            cache.fork(parent, next_id)
            oracle_k[next_id], oracle_v[next_id] = oracle_k[parent], oracle_v[parent]
            next_id += 1
        else:
            seq = rng.choice(live)
            cache.free_sequence(seq)
            del oracle_k[seq], oracle_v[seq]
        if step % 25 == 0 or step == 1499:
            expect_invariants(cache, label)
            for seq in oracle_k:
                expect_sequence(cache, seq, oracle_k[seq], oracle_v[seq], label)


@checks("paged_kv_cache")
def refuses_unknown_sequences_and_bad_tokens(ex):
    """KeyError for a sequence the cache does not hold; ValueError for bad token shapes and an existing id"""
    cache = ex.PagedKVCache(num_blocks=4, block_size=2, num_kv_heads=2, head_dim=3)
    cache.add_sequence(1)
    k, v = tokens(2)
    hint = "look the id up and raise KeyError naming it"
    refuses(lambda: cache.append(5, k, v), "append to sequence 5 (never added)", hint, (KeyError,))
    refuses(lambda: cache.gather(5), "gather(5)", hint, (KeyError,))
    refuses(lambda: cache.fork(5, 6), "fork(5, 6)", hint, (KeyError,))
    refuses(lambda: cache.free_sequence(5), "free_sequence(5)", hint, (KeyError,))
    refuses(lambda: cache.fork(1, 1), "fork(1, 1): the child id exists", "refuse a child id that already exists")
    refuses(lambda: cache.add_sequence(1), "add_sequence(1) twice", "refuse an id that already exists")
    refuses(lambda: cache.append(1, k[:, :1], v[:, :1]), "k (2, 1, 3) for 2 KV heads", "k, v are (n, H_kv, D)")
    expect(
        cache.allocator.num_free() == 4,
        "a refused call allocated blocks",
        input="refused calls",
        expected="4 free",
        got=str(cache.allocator.num_free()),
    )


# ------------------------------------------------------------------------------------------ decode attention


def paged_layout(contexts, block_size, heads, dim, dtype, spare_blocks=3, seed=0):
    """Scatter each sequence's contiguous keys/values into shuffled blocks of a pool filled with NaN.
    Returns (contiguous keys list, values list, key_cache, value_cache, block_tables (-1 padded), context_lens)."""
    gen = torch.Generator().manual_seed(seed)
    needed = [-(-n // block_size) for n in contexts]
    num_blocks = sum(needed) + spare_blocks
    order = torch.randperm(num_blocks, generator=gen).tolist()
    key_cache = torch.full((num_blocks, block_size, heads, dim), float("nan"), dtype=torch.float64)
    value_cache = torch.full_like(key_cache, float("nan"))
    tables = torch.full((len(contexts), max(needed) + 1), -1, dtype=torch.int32)
    keys, values = [], []
    for b, n in enumerate(contexts):
        k = torch.randn(n, heads, dim, dtype=torch.float64, generator=gen)
        v = torch.randn(n, heads, dim, dtype=torch.float64, generator=gen)
        blocks = [order.pop() for _ in range(needed[b])]
        tables[b, : needed[b]] = torch.tensor(blocks, dtype=torch.int32)
        for p in range(n):
            key_cache[blocks[p // block_size], p % block_size] = k[p]
            value_cache[blocks[p // block_size], p % block_size] = v[p]
        keys.append(k.to(dtype))
        values.append(v.to(dtype))
    return keys, values, key_cache.to(dtype), value_cache.to(dtype), tables, torch.tensor(contexts, dtype=torch.int32)


def contiguous_attention(q, keys, values, scale=None):
    """SDPA per sequence over its contiguous keys/values, GQA by repeat_interleave: (B, H_q, D)."""
    outs = []
    for b in range(q.shape[0]):
        group = q.shape[1] // keys[b].shape[1]
        k = keys[b].transpose(0, 1).repeat_interleave(group, dim=0)  # (H_q, n, D)
        v = values[b].transpose(0, 1).repeat_interleave(group, dim=0)
        with reference_only():
            outs.append(F.scaled_dot_product_attention(q[b][:, None], k, v, scale=scale)[:, 0])
    return torch.stack(outs)


HINT_DECODE = (
    "blocks = table[b, :ceil(n / bs)]; keys = key_cache[blocks].flatten(0, 1)[:n]; query head h reads KV head "
    "h // (H_q // H_kv) (repeat_interleave, not repeat)"
)


@checks("paged_decode_attention")
def scattered_blocks_by_hand(ex):
    """one sequence of 5 tokens in blocks of 2 stored in reverse order [4, 2, 0]; unused slots hold NaN"""
    keys, values, kc, vc, tables, lens = paged_layout([5], 2, 1, 4, torch.float64, spare_blocks=2, seed=3)
    q = torch.randn(1, 1, 4, dtype=torch.float64)
    got = ex.paged_decode_attention(q, kc, vc, tables, lens)
    label = describe(q=q, key_cache=kc) + f", block table {tables[0].tolist()}, context 5"
    expect_tensor(got, shape=(1, 1, 4), dtype=torch.float64, input=label)
    expect_close(got, contiguous_attention(q, keys, values), input=label, hint=HINT_DECODE)


@checks("paged_decode_attention")
def matches_contiguous_sdpa(ex):
    """float64: batches of contexts 1, bs, bs+1 and long, MHA/GQA/MQA, shuffled pool, NaN in unused slots, a scale"""
    for contexts, bs, hq, hkv, scale in (
        ([1, 4, 5, 17], 4, 4, 4, None),
        ([9, 16, 3], 8, 8, 2, None),
        ([33, 2], 16, 6, 1, 0.2),
        ([7, 7, 12], 3, 6, 3, None),
        ([8, 3], 4, 2, 2, None),  # the first context fills its table exactly: n == max_blocks * bs
    ):
        keys, values, kc, vc, tables, lens = paged_layout(contexts, bs, hkv, 8, torch.float64)
        tables = tables[:, : max(-(-n // bs) for n in contexts)]  # no spare column: the longest fills the table
        q = torch.randn(len(contexts), hq, 8, dtype=torch.float64)
        got = ex.paged_decode_attention(q, kc, vc, tables, lens, scale=scale)
        label = describe(q=q, key_cache=kc) + f", contexts {contexts}, block_size {bs}, scale={scale}"
        expect(
            bool(torch.isfinite(got).all()),
            "NaN in the output: a stale slot or an unused block was read",
            input=label,
            expected="finite values (the NaN sit only where no correct reader looks)",
            got=f"{int(torch.isnan(got).any(-1).sum())} (sequence, head) rows with NaN",
            hint="keep the first ceil(n / bs) blocks of the table and the first n slots of them",
        )
        expect_close(got, contiguous_attention(q, keys, values, scale), input=label, hint=HINT_DECODE)


@checks("paged_decode_attention")
def low_precision_dtypes(ex):
    """fp16 and bf16 caches: the output in q's dtype, as accurate as SDPA in that dtype"""
    for dtype in (torch.float16, torch.bfloat16):
        keys, values, kc, vc, tables, lens = paged_layout([11, 30, 1], 8, 2, 16, dtype)
        q = torch.randn(3, 4, 16).to(dtype)
        got = ex.paged_decode_attention(q, kc, vc, tables, lens)
        label = describe(q=q, key_cache=kc) + ", contexts [11, 30, 1], GQA 4/2"
        expect_tensor(got, shape=(3, 4, 16), dtype=dtype, input=label)
        oracle = contiguous_attention(q.double(), [k.double() for k in keys], [v.double() for v in values])
        expect_close(
            got, oracle, baseline=contiguous_attention(q, keys, values), input=label, hint="compute in float32"
        )


@checks("paged_decode_attention")
def refuses_bad_tables_and_lengths(ex):
    """ValueError: a block table past its pool, a negative id in use, a context longer than the table, H_q % H_kv"""
    keys, values, kc, vc, tables, lens = paged_layout([5, 3], 2, 2, 4, torch.float64, spare_blocks=0)
    q = torch.randn(2, 4, 4, dtype=torch.float64)
    f = ex.paged_decode_attention
    past = tables.clone()
    past[1, 0] = kc.shape[0]
    expect_value_error(
        lambda: f(q, kc, vc, past, lens),
        f"block id {kc.shape[0]} in a pool of {kc.shape[0]}",
        "check every block id a sequence uses",
    )
    negative = tables.clone()
    negative[0, 2] = -1
    expect_value_error(
        lambda: f(q, kc, vc, negative, lens),
        "block id -1 inside the context",
        "a padding id inside the context is an error",
    )
    too_long = torch.tensor([5, tables.shape[1] * 2 + 1])
    expect_value_error(
        lambda: f(q, kc, vc, tables, too_long),
        f"context {too_long[1]} > {tables.shape[1]} blocks x 2",
        "n <= max_blocks * bs",
    )
    expect_value_error(
        lambda: f(q, kc, vc, tables, torch.tensor([5, 0])), "context length 0", "a decode step attends to >= 1 token"
    )
    expect_value_error(
        lambda: f(torch.randn(2, 3, 4, dtype=torch.float64), kc, vc, tables, lens),
        "3 query heads, 2 KV heads",
        "H_q must be a multiple of H_kv",
    )
    padded = tables.clone()
    padded[1, 2:] = 10**6  # padding past the context is never read, so it is not an error
    got = f(q, kc, vc, padded, lens)
    expect_close(
        got,
        contiguous_attention(q, keys, values),
        input="garbage ids past the context",
        hint="validate and read only the first ceil(n / bs) entries",
    )
