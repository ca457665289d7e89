"""Checks for p03.paged_attention. References: one contiguous cache per case, scattered by the checks into a shuffled
pool (NaN in every pool slot a correct kernel never reads, table padding of -1 or of ids past the pool, prefix blocks
shared by two sequences); float64 partial states of that contiguous cache computed slice by slice,
`F.scaled_dot_product_attention` in float64 per sequence, and the contiguous kernel of p03.decode_attention on the
same data (the learner's own when it passes, else its reference)."""

import math

import torch
import torch.nn.functional as F

from llm_algo.bench import bandwidth_row, copy_row, graph_bandwidth_row
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
from llm_algo.references.kernels import expect_guard_untouched, guarded
from llm_algo.references.layouts import UNIT_LAST_STRIDE, describe_layouts, distinct_layouts, with_layout

GATHER = (torch.index_select, torch.Tensor.index_select, torch.gather, torch.Tensor.gather, torch.take)

checks = Checks("p03.paged_attention", triton=True)
checks.restrict(
    "paged_decode_partials",
    "paged_decode_attention",
    kernel=True,
    forbid=[*ATTENTION, *SOFTMAX, *LOGSUMEXP, *MATMUL, *GATHER],
    instead="gather K/V through the block table inside your @triton.jit kernel (SDPA and the gathered cache are "
    "the checks' references)",
)
HINT_GATHER = "key t of sequence b is pool[block_tables[b, t // block_size], t % block_size, kv_head, :]"
HINT_TABLE = "load the table entry with the same mask as the keys: padding entries (-1, past the pool) are not ids"


def sixteen_bit_dtypes():
    return [dtype for dtype in triton_dtypes() if dtype != torch.float32]


def paged_case(batch, heads, kv_heads, head_dim, lens, block_size, dtype, max_blocks, shared=0, pad=-1, spare=3):
    """q, the contiguous caches (B, H_kv, max_blocks * bs, d) with NaN past each length, the pools
    (num_blocks, bs, H_kv, d) holding the same tokens in shuffled blocks (NaN in every unused block and slot), the
    block tables (B, max_blocks) int32 padded with `pad` (-1, or 'past' for ids past the pool), seq_lens int32.
    Sequences 0 and 1 share their first `shared` blocks (the same ids; the contiguous caches agree there)."""
    device = triton_device()
    capacity = max_blocks * block_size
    q = torch.randn(batch, heads, head_dim).to(dtype)
    k = torch.randn(batch, kv_heads, capacity, head_dim).to(dtype)
    v = torch.randn(batch, kv_heads, capacity, head_dim).to(dtype)
    if shared:
        k[1, :, : shared * block_size] = k[0, :, : shared * block_size]
        v[1, :, : shared * block_size] = v[0, :, : shared * block_size]
    for b, n in enumerate(lens):
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    needed = [-(-n // block_size) for n in lens]
    num_blocks = sum(needed) - (min(shared, needed[1]) if shared else 0) + spare
    ids = torch.randperm(num_blocks - spare).tolist()  # the used ids, shuffled: block 0 is always in use, the spare
    # blocks (the highest ids, NaN) never are
    tables = torch.full((batch, max_blocks), -1, dtype=torch.int32)
    for b in range(batch):
        for j in range(needed[b]):
            tables[b, j] = tables[0, j] if (b == 1 and j < shared) else ids.pop()
        if pad == "past":
            tables[b, needed[b] :] = num_blocks + 7
    pool_k = torch.full((num_blocks, block_size, kv_heads, head_dim), float("nan")).to(dtype)
    pool_v = pool_k.clone()
    for b in range(batch):
        for j in range(needed[b]):
            rows = slice(j * block_size, (j + 1) * block_size)
            pool_k[tables[b, j]] = k[b, :, rows].transpose(0, 1)
            pool_v[tables[b, j]] = v[b, :, rows].transpose(0, 1)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    return tuple(t.to(device) for t in (q, k, v, pool_k, pool_v, tables, seq_lens))


def expect_partials(result, q, k, v, seq_lens, split_size, label):
    m, mass, acc = result
    batch, heads, head_dim = q.shape
    n_splits = -(-k.shape[2] // split_size)
    expect_tensor(m, shape=(batch, heads, n_splits), dtype=torch.float32, input=label, what="m")
    expect_tensor(mass, shape=(batch, heads, n_splits), dtype=torch.float32, input=label, what="l")
    expect_tensor(acc, shape=(batch, heads, n_splits, head_dim), dtype=torch.float32, input=label, what="acc")
    m64, mass64, acc64 = slice_states(q, k, v, seq_lens, split_size)
    m32, mass32, acc16 = slice_states(q, k, v, seq_lens, split_size, dtype=torch.float32, p_dtype=q.dtype)
    hint = f"{HINT_GATHER}; {HINT_TABLE}"
    expect_close(m, m64, baseline=m32, input=label, what="m (max score per slice)", hint=hint)
    expect_close(mass, mass64, baseline=mass32, input=label, what="l (sum of exp(x - m) per slice)", hint=hint)
    expect_close(acc, acc64, baseline=acc16, dtype=q.dtype, input=label, what="acc (sum of p v per slice)", hint=hint)


def expect_decode(result, q, k, v, seq_lens, label, contiguous=None):
    """out and lse vs SDPA (float64) per sequence; with `contiguous` (the p03.decode_attention result on the same
    data and num_splits), also close to it within the tolerance SDPA's own rounding sets."""
    out, lse = result
    expect_tensor(out, shape=q.shape, dtype=q.dtype, device=q.device.type, input=label, what="out")
    expect_tensor(lse, shape=q.shape[:2], dtype=torch.float32, input=label, what="lse")
    out64, lse64 = sdpa_per_sequence(q, k, v, seq_lens)
    out_same, _ = sdpa_per_sequence(q, k, v, seq_lens, dtype=q.dtype)
    _, lse32 = sdpa_per_sequence(q, k, v, seq_lens, dtype=torch.float32)
    hint = f"{HINT_GATHER}; {HINT_TABLE}"
    expect_close(out, out64, baseline=out_same, input=label, what="out", hint=hint)
    expect_close(lse, lse64, baseline=lse32, input=label, what="lse", hint=hint)
    if contiguous is not None:
        expect_close(
            out,
            contiguous[0].double(),
            baseline=out_same,
            input=label,
            what="out vs the contiguous decode_attention on the same data",
            hint="the paged kernel must compute exactly what the contiguous one does; " + HINT_GATHER,
        )


# ------------------------------------------------------------------------------------------ paged_decode_partials


@checks("paged_decode_partials", gate=True)
def paged_kernel_stays_inside_its_outputs(ex):
    """launches paged_split_kernel on pools that are windows of larger buffers (strided blocks and heads), tables
    padded with -1, lengths 9 and 37 over 8-token pages in tables of 5 blocks (the last tile of the last row reaches
    past the table's end), 2 splits of 32; guards after m, l, acc must survive, nothing out of bounds may be read"""
    batch, heads, kv_heads, head_dim, block_size, max_blocks, split = 2, 4, 2, 32, 8, 5, 32
    q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(
        batch, heads, kv_heads, head_dim, [9, 37], block_size, torch.float16, max_blocks
    )
    device = triton_device()
    wide_k = torch.randn(pool_k.shape[0] + 2, block_size, kv_heads + 1, head_dim + 8, device=device).half()
    wide_v = torch.randn_like(wide_k)
    window = (slice(0, pool_k.shape[0]), slice(None), slice(0, kv_heads), slice(0, head_dim))
    wide_k[window], wide_v[window] = pool_k, pool_v
    pool_k, pool_v = wide_k[window], wide_v[window]
    n_splits = -(-max_blocks * block_size // split)
    rows = batch * heads * n_splits
    m_buffer, m = guarded((rows,), (16,), device=device)
    l_buffer, mass = guarded((rows,), (16,), device=device)
    acc_buffer, acc = guarded((rows * head_dim,), (64,), device=device)
    ex.paged_split_kernel[(n_splits, batch, kv_heads)](
        q, pool_k, pool_v, tables, seq_lens, m, mass, acc,
        q.stride(0), q.stride(1),
        pool_k.stride(0), pool_k.stride(1), pool_k.stride(2),
        pool_v.stride(0), pool_v.stride(1), pool_v.stride(2),
        tables.stride(0),
        heads, kv_heads, n_splits, split, 1.0 / math.sqrt(head_dim) * math.log2(math.e),
        HEAD_DIM=head_dim, PAGE_SIZE=block_size, BLOCK_G=16, BLOCK_N=16,
    )  # fmt: skip
    label = (
        f"pools {tuple(pool_k.shape)} with strides {pool_k.stride()}, tables {tables.tolist()}, seq_lens [9, 37], "
        "grid (2, 2, 2), split_size 32, PAGE_SIZE 8, BLOCK_N 16"
    )
    hint = "mask the stores with the group's real heads; " + HINT_TABLE
    expect_guard_untouched(m_buffer, m.shape, input=label, hint=hint)
    expect_guard_untouched(l_buffer, mass.shape, input=label, hint=hint)
    expect_guard_untouched(acc_buffer, acc.shape, input=label, hint=hint)
    shaped = (m.view(batch, heads, -1), mass.view(batch, heads, -1), acc.view(batch, heads, n_splits, -1))
    expect_partials(shaped, q, k, v, seq_lens, split, label)


PAGED_CASES = [
    # (batch, H_q, H_kv, d, lengths, block_size, max_blocks, shared, pad, split_size)
    (3, 8, 2, 32, [45, 1, 30], 16, 4, 0, -1, 32),  # pages as wide as the interpreter's tile
    (2, 4, 1, 64, [36, 21], 4, 12, 2, -1, 16),  # 4 pages per tile, a shared prefix, 9 full blocks then -1
    (2, 6, 2, 128, [96, 50], 32, 3, 1, "past", 48),  # pages wider than a tile, a full table, d 128, padding past
    (2, 4, 4, 16, [23, 9], 5, 6, 0, "past", 16),  # a page size that is not a power of two
    (2, 4, 2, 32, [70, 20], 16, 5, 0, -1, 64),  # split_size 64: the default block_n (16 here, 64 on a GPU)
]


@checks("paged_decode_partials")
def each_operand_in_its_own_layout(ex):
    """q a slice of a fused QKV, the key pool with padded rows, the value pool a window of a bigger buffer, the tables
    a column block of a wider int32 tensor (every operand its own strides, head dim and entries contiguous), vs float64
    slices of the same values; then seq_lens every 3rd element of a buffer: refused or right"""
    q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(2, 4, 2, 32, [37, 9], 8, torch.float16, 5)
    lq, lpool_k, lpool_v, ltables = distinct_layouts(q, pool_k, pool_v, tables, order=UNIT_LAST_STRIDE)
    label = describe_layouts(q=lq, key_cache=lpool_k, value_cache=lpool_v, block_tables=ltables)
    label += f", tables {tables.tolist()}, seq_lens [37, 9], split_size 32, block_n 16"
    result = ex.paged_decode_partials(lq, lpool_k, lpool_v, ltables, seq_lens, 32, block_n=16)
    expect_partials(result, q, k, v, seq_lens, 32, label)
    strided_lens = with_layout(seq_lens, "fused_slice")
    label = (
        f"seq_lens [37, 9] with stride {strided_lens.stride(0)} (a column of a (2, 3) int32 tensor), contiguous q/pools"
    )
    expect_refused_or_correct(
        lambda: ex.paged_decode_partials(q, pool_k, pool_v, tables, strided_lens, 32, block_n=16),
        lambda result: expect_partials(result, q, k, v, seq_lens, 32, label + " (accepted, so it must be right)"),
        input=label,
        hint="the kernel reads seq_lens_ptr + b: pass seq_lens.contiguous() (or its stride), or refuse a strided "
        "seq_lens with a ValueError",
    )


@checks("paged_decode_partials")
def paged_partials_match_float64_slices(ex):
    """(m, l, acc) per slice vs float64 on the contiguous cache: pages of 4, 5, 16 and 32 tokens, shared prefix
    blocks, table padding -1 or past the pool (validate=True must accept both), lengths 1 to capacity, GQA 4:1,
    3:1, 1:1; fp16 (+bf16 on a GPU)"""
    for dtype in sixteen_bit_dtypes():
        for batch, heads, kv_heads, head_dim, lens, bs, max_blocks, shared, pad, split in PAGED_CASES:
            q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(
                batch, heads, kv_heads, head_dim, lens, bs, dtype, max_blocks, shared, pad
            )
            label = (
                describe(q=q, pool=pool_k) + f", seq_lens {lens}, tables {tables.tolist()}, split_size {split}"
                + (f", sequences 0 and 1 share {shared} blocks" if shared else "")
            )  # fmt: skip
            block_n = None if split % 64 == 0 else 16
            result = ex.paged_decode_partials(q, pool_k, pool_v, tables, seq_lens, split, block_n=block_n)
            expect_partials(result, q, k, v, seq_lens, split, label)


@checks("paged_decode_partials")
def paged_refuses_bad_tables(ex):
    """a used entry equal to num_blocks (also in the last used block), a used entry -1, a length past
    max_blocks * block_size (first or second), a float table, strided table entries, a length 0, float lengths, pools
    of different shapes or dtypes, 5 heads on 2 KV heads, a strided head dim, split_size not a multiple of block_n (on
    a GPU: lengths on the CPU): ValueError"""
    q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(2, 4, 2, 32, [17, 9], 8, torch.float16, 4)
    num_blocks = pool_k.shape[0]
    full = tables.clamp_min(0)  # every entry a valid id: only the length check can refuse a length past 32
    past = tables.clone()
    past[0, 1] = num_blocks
    negative = tables.clone()
    negative[1, 0] = -1
    device = triton_device()
    last = tables.clone()
    last[0, 2] = num_blocks
    strided = torch.zeros(2, 8, device=device, dtype=torch.int32)
    strided[:, ::2] = tables
    lens = lambda *values: torch.tensor(values, device=device, dtype=torch.int32)  # noqa: E731
    bad = [
        (f"block_tables[0, 1] = {num_blocks} (the pool has {num_blocks} blocks), used by length 17", q, past, seq_lens, pool_k, pool_v, 16),
        (f"block_tables[0, 2] = {num_blocks}, the last block length 17 uses (1 token)", q, last, seq_lens, pool_k, pool_v, 16),
        ("block_tables[1, 0] = -1, used by length 9", q, negative, seq_lens, pool_k, pool_v, 16),
        ("seq_lens [33, 9] with 4 blocks of 8 per table", q, full, lens(33, 9), pool_k, pool_v, 16),
        ("seq_lens [9, 33] with 4 blocks of 8 per table", q, full, lens(9, 33), pool_k, pool_v, 16),
        ("float32 block_tables", q, tables.float(), seq_lens, pool_k, pool_v, 16),
        ("block_tables with strided entries (every 2nd column)", q, strided[:, ::2], seq_lens, pool_k, pool_v, 16),
        ("seq_lens [0, 9]", q, tables, lens(0, 9), pool_k, pool_v, 16),
        ("seq_lens float32", q, tables, seq_lens.float(), pool_k, pool_v, 16),
        ("value pool with one block less", q, tables, seq_lens, pool_k, pool_v[:-1], 16),
        ("q float16, pools float32", q, tables, seq_lens, pool_k.float(), pool_v.float(), 16),
        ("5 query heads on 2 KV heads", torch.randn(2, 5, 32, device=device).half(), tables, seq_lens, pool_k, pool_v, 16),
        ("q with a strided head dim", torch.randn(2, 4, 64, device=device).half()[..., ::2], tables, seq_lens, pool_k, pool_v, 16),
        ("split_size 24 with block_n 16", q, tables, seq_lens, pool_k, pool_v, 24),
        ("split_size 0", q, tables, seq_lens, pool_k, pool_v, 0),
    ]  # fmt: skip
    if device == "cuda":
        bad.append(("seq_lens on the CPU, q on the GPU", q, tables, seq_lens.cpu(), pool_k, pool_v, 16))
    for label, bq, btables, blens, bpool_k, bpool_v, split in bad:
        expect_value_error(
            lambda bq=bq, btables=btables, blens=blens, bpool_k=bpool_k, bpool_v=bpool_v, split=split: (
                ex.paged_decode_partials(bq, bpool_k, bpool_v, btables, blens, split, block_n=16)
            ),
            input=label,
            hint="check the used entries (j < ceil(len / bs)) against [0, num_blocks), 1 <= len <= max_blocks * bs, "
            "integer tables, equal pool shapes, split_size % block_n",
        )


@checks("paged_decode_partials")
def paged_refuses_or_computes_float32_and_d80(ex):
    """float32 q and pools, head_dim 80: refuse with a clear ValueError/TypeError, or be correct"""
    may_support = [
        ("float32 q and pools", paged_case(2, 4, 2, 32, [20, 9], 8, torch.float32, 4)),
        ("head_dim 80", paged_case(2, 4, 2, 80, [20, 9], 8, torch.float16, 4)),
    ]
    for label, (q, k, v, pool_k, pool_v, tables, seq_lens) in may_support:
        expect_refused_or_correct(
            lambda q=q, pool_k=pool_k, pool_v=pool_v, tables=tables, seq_lens=seq_lens: ex.paged_decode_partials(
                q, pool_k, pool_v, tables, seq_lens, 16, block_n=16
            ),
            lambda result, q=q, k=k, v=v, seq_lens=seq_lens, label=label: expect_partials(
                result, q, k, v, seq_lens, 16, label + " (accepted, so it must be right)"
            ),
            input=label,
            hint="either raise ValueError with a message before launching, or compute it correctly",
        )


@checks("paged_decode_partials", requires_compiled=True)
def page_offsets_past_2_31_elements(ex):
    """pools of 2**20 + 64 pages of 16 slots x 1 KV head x d 128 (2**31 + 2**17 elements, 4.3 GB of fp16 each), tables
    that use pages past 2**20, where an int32 page * stride_kblock (2048) wraps; lengths 50 and 64, splits of 32"""
    num_blocks, block_size, head_dim, lens = 2**20 + 64, 16, 128, [50, 64]
    q = torch.randn(2, 4, head_dim, device=triton_device()).half()
    k, v = (torch.randn(2, 1, 64, head_dim, device=triton_device()).half() for _ in "kv")
    for b, n in enumerate(lens):
        k[b, :, n:], v[b, :, n:] = float("nan"), float("nan")
    last = num_blocks - 1
    tables = torch.tensor(
        [[last, 3, last - 5, 2**20 + 1], [last - 1, 2**20, 7, last - 2]], device=triton_device()
    ).int()
    pool_k = torch.full(
        (num_blocks, block_size, 1, head_dim), float("nan"), device=triton_device(), dtype=torch.float16
    )
    pool_v = torch.full_like(pool_k, float("nan"))
    for b in range(2):
        for j in range(4):
            rows = slice(j * block_size, (j + 1) * block_size)
            pool_k[tables[b, j]] = k[b, :, rows].transpose(0, 1)
            pool_v[tables[b, j]] = v[b, :, rows].transpose(0, 1)
    seq_lens = torch.tensor(lens, device=triton_device(), dtype=torch.int32)
    label = (
        f"pools {tuple(pool_k.shape)} float16 (page {last} starts at element {last * pool_k.stride(0)} > 2**31), "
        f"tables {tables.tolist()}, seq_lens {lens}, split_size 32"
    )
    try:
        result = ex.paged_decode_partials(q, pool_k, pool_v, tables, seq_lens, 32, block_n=16)
        expect_partials(result, q, k, v, seq_lens, 32, label)
    finally:
        del pool_k, pool_v
        torch.cuda.empty_cache()


@checks("paged_decode_partials", requires_compiled=True)
def paged_partials_at_scale(ex):
    """Llama-3-8B heads (32 on 8, d 128), 16-token pages, 300 blocks per table, lengths 4800, 1 and 3333, splits of
    1024, default block_n"""
    for dtype in sixteen_bit_dtypes():
        q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(3, 32, 8, 128, [4800, 1, 3333], 16, dtype, 300)
        label = describe(q=q, pool=pool_k) + ", seq_lens [4800, 1, 3333], split_size 1024"
        result = ex.paged_decode_partials(q, pool_k, pool_v, tables, seq_lens, 1024)
        expect_partials(result, q, k, v, seq_lens, 1024, label)


# ----------------------------------------------------------------------------------------- paged_decode_attention


DECODE_CASES = [
    # (batch, H_q, H_kv, d, lengths, block_size, max_blocks, shared, pad, num_splits)
    (3, 8, 2, 32, [80, 1, 45], 16, 5, 0, -1, None),
    (3, 8, 2, 32, [80, 1, 45], 16, 5, 0, "past", 1),
    (3, 8, 2, 32, [80, 1, 45], 16, 5, 0, -1, 3),
    (2, 4, 1, 64, [61, 50], 8, 8, 5, -1, 2),  # 5 shared prefix blocks (40 tokens)
    (2, 6, 2, 16, [7, 40], 4, 10, 0, -1, 8),  # more splits than sequence 0 has blocks: empty slices
]


@checks("paged_decode_attention")
def equals_contiguous_kernel_and_sdpa(ex):
    """one cache scattered into a shuffled pool (shared prefixes, -1 and past-the-pool padding): out and lse vs
    SDPA (float64), and out vs p03.decode_attention on the contiguous cache with the same num_splits"""
    for dtype in sixteen_bit_dtypes():
        for batch, heads, kv_heads, head_dim, lens, bs, max_blocks, shared, pad, splits in DECODE_CASES:
            q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(
                batch, heads, kv_heads, head_dim, lens, bs, dtype, max_blocks, shared, pad
            )
            label = describe(q=q, pool=pool_k) + f", seq_lens {lens}, tables {tables.tolist()}, num_splits={splits}"
            contiguous = ex.decode_attention(q, k, v, seq_lens, num_splits=splits)
            result = ex.paged_decode_attention(q, pool_k, pool_v, tables, seq_lens, num_splits=splits)
            expect_decode(result, q, k, v, seq_lens, label, contiguous=contiguous)


@checks("paged_decode_attention")
def every_table_row_is_its_own(ex):
    """two sequences whose tables point at different blocks holding different values: each output must come from its
    own table (a kernel that reads row 0 of the table for every sequence, or ignores the table, is caught)"""
    q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(3, 4, 2, 32, [30, 30, 30], 8, torch.float16, 4)
    q = q[:1].expand(3, -1, -1).contiguous()  # the same query everywhere: only the table tells the rows apart
    out, _ = ex.paged_decode_attention(q, pool_k, pool_v, tables, seq_lens, num_splits=2)
    refs = [sdpa_per_sequence(q[b : b + 1], k[b : b + 1], v[b : b + 1], seq_lens[b : b + 1])[0][0] for b in range(3)]
    for b in range(3):
        errors = [float((out[b].double().cpu() - ref).abs().max()) for ref in refs]
        used = min(range(3), key=lambda j: errors[j])
        expect(
            used == b,
            f"sequence {b} read another sequence's blocks",
            input=f"3 sequences of 30 tokens in 8-token pages, tables {tables.tolist()}",
            expected=f"the cache of sequence {b}",
            got=f"closest to sequence {used}'s cache",
            hint="offset the table pointer by batch * stride_tb",
        )


@checks("paged_decode_attention")
def paged_wrapper_refuses(ex):
    """num_splits 0, a used table entry past the pool, a length past the table's capacity: ValueError"""
    q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(2, 4, 2, 32, [20, 9], 8, torch.float16, 4)
    past = tables.clone()
    past[1, 1] = pool_k.shape[0] + 100
    past[1, 0] = pool_k.shape[0]
    long = torch.tensor([20, 40], device=seq_lens.device, dtype=torch.int32)
    bad = [
        ("num_splits=0", tables, seq_lens, 0),
        (f"block_tables[1, 0] = {pool_k.shape[0]} (past the pool), used by length 9", past, seq_lens, 2),
        ("seq_lens [20, 40] with 4 blocks of 8 per table", tables, long, 2),
    ]
    for label, btables, blens, splits in bad:
        expect_value_error(
            lambda btables=btables, blens=blens, splits=splits: ex.paged_decode_attention(
                q, pool_k, pool_v, btables, blens, num_splits=splits
            ),
            input=label,
            hint="check num_splits >= 1 and the used table entries and lengths before launching",
        )


@checks("paged_decode_attention", requires_compiled=True)
def paged_matches_at_scale(ex):
    """Llama-3-8B heads, 16-token pages, lengths 8192, 3000 and 1 in tables of 512 blocks, default splits, against
    SDPA and the contiguous kernel"""
    for dtype in sixteen_bit_dtypes():
        q, k, v, pool_k, pool_v, tables, seq_lens = paged_case(3, 32, 8, 128, [8192, 3000, 1], 16, dtype, 512, 2)
        label = describe(q=q, pool=pool_k) + ", seq_lens [8192, 3000, 1], 2 shared blocks"
        contiguous = ex.decode_attention(q, k, v, seq_lens)
        expect_decode(
            ex.paged_decode_attention(q, pool_k, pool_v, tables, seq_lens), q, k, v, seq_lens, label, contiguous
        )


# ------------------------------------------------------------------------------------------------------ benchmark


def benchmark(ex):
    """Llama-3-8B decode (32 query heads, 8 KV heads, d 128, bf16), batch 8 x 32768 tokens, 16-token pages in a
    shuffled pool: paged vs contiguous (the same data, one run), SDPA's default backend, the copy roofline."""
    batch, heads, kv_heads, head_dim, cache_len, bs = 8, 32, 8, 128, 32768, 16
    q = torch.randn(batch, heads, head_dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, kv_heads, cache_len, head_dim, device="cuda", dtype=torch.bfloat16) for _ in "kv")
    blocks = cache_len // bs
    tables = torch.randperm(batch * blocks, device="cuda").view(batch, blocks).to(torch.int32)
    pool_k = torch.empty(batch * blocks, bs, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    pool_v = torch.empty_like(pool_k)
    for b in range(batch):
        pool_k[tables[b].long()] = k[b].transpose(0, 1).reshape(blocks, bs, kv_heads, head_dim)
        pool_v[tables[b].long()] = v[b].transpose(0, 1).reshape(blocks, bs, kv_heads, head_dim)
    seq_lens = torch.full((batch,), cache_len, device="cuda", dtype=torch.int32)
    kv_bytes = 2 * k.numel() * k.element_size()
    shape = f"B{batch} Hq32 Hkv8 S32768 d128 bf16, pages of {bs}"

    def paged():
        return ex.paged_decode_attention(q, pool_k, pool_v, tables, seq_lens, validate=False)

    def contiguous():
        return ex.decode_attention(q, k, v, seq_lens, validate=False)

    def sdpa_default():
        return F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)

    return [
        bandwidth_row("paged_decode_attention", shape, paged, kv_bytes),
        graph_bandwidth_row("paged_decode_attention (CUDA graph)", shape, paged, kv_bytes),
        bandwidth_row("decode_attention, contiguous (p03.decode_attention)", shape, contiguous, kv_bytes),
        graph_bandwidth_row("decode_attention, contiguous (CUDA graph)", shape, contiguous, kv_bytes),
        bandwidth_row("SDPA default backend (enable_gqa), contiguous", shape, sdpa_default, kv_bytes),
        copy_row(kv_bytes // 2),
    ]
