"""Checks for p01.flash_attention_io. References: `F.scaled_dot_product_attention` in float64 (float32 as the
baseline); the bytes the checks' own `RecordingHBM` counts while a standard three-kernel attention (written here,
tensor by tensor) and the learner's tiled attention run, with the rows of every tile each load and store moved (so
the SRAM a schedule needs is measured, not taken from the learner's code); and a loop over the blocks of the Q-outer
schedule for the tiled traffic."""

import math
import random

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_exact_int, expect_value_error
from llm_algo.check.restrictions import ATTENTION, SOFTMAX

checks = Checks("p01.flash_attention_io")
checks.restrict(
    "tiled_attention",
    forbid=[*ATTENTION, *SOFTMAX],
    instead="exponentiate and rescale with the online-softmax recurrence (SDPA is the checks' reference)",
)


class RecordingHBM:
    """The lesson's `HBM` (same methods, same byte counts), kept on the checks' side so that nothing the learner's
    code defines or reports is trusted: it also records the rows of every tile each `load` and `store` moved."""

    def __init__(self, **tensors):
        self.tensors = {name: t.clone() for name, t in tensors.items()}
        self.bytes_read = 0
        self.bytes_written = 0
        self.loaded_rows: dict[str, list[int]] = {}  # tensor name -> rows of each tile loaded, in order
        self.stored_rows: dict[str, list[int]] = {}

    def alloc(self, name, shape, dtype):
        self.tensors[name] = torch.full(shape, float("nan"), dtype=dtype)

    def load(self, name, start, stop):
        tile = self.tensors[name][start:stop].clone()
        self.bytes_read += tile.numel() * tile.element_size()
        self.loaded_rows.setdefault(name, []).append(tile.shape[0])
        return tile

    def store(self, name, start, tile):
        target = self.tensors[name]
        target[start : start + tile.shape[0]] = tile
        self.bytes_written += tile.numel() * target.element_size()
        self.stored_rows.setdefault(name, []).append(tile.shape[0])

    @property
    def bytes_moved(self):
        return self.bytes_read + self.bytes_written

    def largest_tile(self, name: str) -> int:
        """The most rows of tensor `name` that one load or store moved (0 when it was never touched)."""
        return max(self.loaded_rows.get(name, []) + self.stored_rows.get(name, []), default=0)


def counted_standard(n: int, d: int, dtype: torch.dtype) -> int:
    """Run S = QK^T/sqrt(d), P = softmax(S), O = PV as three 'kernels' that start and end in HBM."""
    hbm = RecordingHBM(
        q=torch.randn(n, d, dtype=dtype), k=torch.randn(n, d, dtype=dtype), v=torch.randn(n, d, dtype=dtype)
    )
    hbm.alloc("s", (n, n), dtype)
    hbm.store("s", 0, hbm.load("q", 0, n) @ hbm.load("k", 0, n).T / math.sqrt(d))
    hbm.alloc("p", (n, n), dtype)
    hbm.store("p", 0, torch.softmax(hbm.load("s", 0, n), dim=-1))
    hbm.alloc("o", (n, d), dtype)
    hbm.store("o", 0, hbm.load("p", 0, n) @ hbm.load("v", 0, n))
    return hbm.bytes_moved


def tiled_schedule_bytes(n: int, d: int, block_q: int, element: int) -> int:
    """The Q-outer schedule as a loop: each Q block read and its O block written once, all K/V blocks per Q block."""
    total = 0
    for q_start in range(0, n, block_q):
        rows = min(block_q, n - q_start)
        total += 2 * rows * d * element  # Q block in, O block out
        total += 2 * n * d * element  # every K and V row once for this Q block
    return total


# ------------------------------------------------------------------------------------------ standard_attention_bytes

HINT_STANDARD = "per head: QK^T reads 2Nd writes N^2; softmax reads N^2 writes N^2; PV reads N^2 + Nd writes Nd"


@checks("standard_attention_bytes")
def matches_counted_three_kernels(ex):
    """the bytes the HBM object counts while three kernels run (fp32, fp64, odd sizes)"""
    for n, d, dtype in ((7, 3, torch.float32), (16, 8, torch.float64), (1, 5, torch.float32), (33, 4, torch.float16)):
        want = counted_standard(n, d, dtype)
        element = torch.empty((), dtype=dtype).element_size()
        got = ex.standard_attention_bytes(n, d, element)
        expect_exact_int(got, want, f"N={n}, d={d}, {dtype} (counted by HBM)", HINT_STANDARD, "bytes")


@checks("standard_attention_bytes")
def gpt2_medium_and_batches(ex):
    """GPT-2 medium shapes (N=1024, d=64, fp16): 4Nd + 4N^2 per head, times 64 x 16 (batch x heads)"""
    for n, d, size, bh in ((1024, 64, 2, 64 * 16), (1024, 64, 2, 1), (8192, 128, 2, 32), (3, 2, 4, 5)):
        want = bh * (4 * n * d + 4 * n * n) * size
        got = ex.standard_attention_bytes(n, d, size, bh)
        expect_exact_int(got, want, f"N={n}, d={d}, element {size} B, batch_heads={bh}", HINT_STANDARD, "bytes")


@checks("standard_attention_bytes")
def refuses_empty_sizes(ex):
    """a zero or negative length, head size, element size or batch raises ValueError"""
    ex.standard_attention_bytes(8, 4, 2)  # first: it works at all
    for args in ((0, 4, 2, 1), (8, 0, 2, 1), (8, 4, 0, 1), (8, 4, 2, 0), (-1, 4, 2, 1)):
        expect_value_error(
            lambda args=args: ex.standard_attention_bytes(*args),
            "seq_len={}, head_dim={}, element_size={}, batch_heads={}".format(*args),
            "check every size >= 1 first",
        )


# ------------------------------------------------------------------------------------------ tiled_attention

HINT_TILED = (
    "per K/V block: new_max = max(m, rowmax S); alpha = exp(m - new_max); l = alpha*l + rowsum(exp(S - new_max)); "
    "acc = alpha*acc + exp(S - new_max) @ V; at the end O = acc / l"
)


def run_tiled(ex, q, k, v, block_q, block_kv) -> RecordingHBM:
    hbm = RecordingHBM(q=q, k=k, v=v)
    result = ex.tiled_attention(hbm, block_q, block_kv)
    expect(
        "o" in hbm.tensors,
        "nothing was written to hbm 'o'",
        input=describe(q=q) + f", block_q={block_q}, block_kv={block_kv}",
        expected='hbm.alloc("o", (N, d), dtype) and hbm.store("o", start, tile) per Q block',
        got=f"returned {type(result).__name__}, hbm holds {sorted(hbm.tensors)}",
        hint="write the output through hbm.store",
    )
    return hbm


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q[None], k[None], v[None])[0]


@checks("tiled_attention")
def matches_sdpa(ex):
    """float64 and float32, N not a multiple of either block, one block for everything, blocks of one row"""
    cases = [(37, 8, 8, 16, torch.float64), (37, 8, 16, 5, torch.float32), (20, 4, 64, 64, torch.float64)]
    cases += [(9, 3, 1, 1, torch.float64), (50, 16, 7, 50, torch.float32)]
    for n, d, bq, bk, dtype in cases:
        q, k, v = (torch.randn(n, d, dtype=torch.float64) for _ in range(3))
        hbm = run_tiled(ex, q.to(dtype), k.to(dtype), v.to(dtype), bq, bk)
        baseline = sdpa(q.to(dtype), k.to(dtype), v.to(dtype)) if dtype != torch.float64 else None
        expect_close(
            hbm.tensors["o"],
            sdpa(q, k, v),
            baseline=baseline,
            dtype=dtype,
            input=describe(q=q.to(dtype)) + f", block_q={bq}, block_kv={bk}",
            hint=HINT_TILED,
        )


@checks("tiled_attention")
def large_logits_and_late_maximum(ex):
    """scores up to ~100 (exp overflows without the max) and the row maximum only in the last K block"""
    n, d = 24, 4
    q = torch.randn(n, d, dtype=torch.float64) * 6
    k = torch.randn(n, d, dtype=torch.float64) * 6
    k[-3:] *= 4  # the largest scores of most rows sit in the last block
    v = torch.randn(n, d, dtype=torch.float64)
    for bq, bk in ((8, 8), (5, 7)):
        for dtype in (torch.float64, torch.float32):
            hbm = run_tiled(ex, q.to(dtype), k.to(dtype), v.to(dtype), bq, bk)
            baseline = sdpa(q.to(dtype), k.to(dtype), v.to(dtype)) if dtype != torch.float64 else None
            expect_close(
                hbm.tensors["o"],
                sdpa(q, k, v),
                baseline=baseline,
                dtype=dtype,
                input=f"{describe(q=q.to(dtype))}, |scores| up to ~100, max in the last block; block_q={bq}, block_kv={bk}",
                hint="rescale both the accumulator and the denominator by exp(old_max - new_max)",
            )


@checks("tiled_attention")
def moves_the_bytes_of_the_schedule(ex):
    """the HBM object counts Q once, O once and K, V once per Q block; the output keeps the input dtype"""
    rng = random.Random(torch.initial_seed())
    for _ in range(4):
        n, d = rng.randrange(5, 60), rng.choice([2, 4, 8])
        bq, bk = rng.randrange(1, 20), rng.randrange(1, 20)
        dtype = rng.choice([torch.float32, torch.float64])
        q, k, v = (torch.randn(n, d, dtype=dtype) for _ in range(3))
        hbm = run_tiled(ex, q, k, v, bq, bk)
        label = f"{describe(q=q)}, block_q={bq}, block_kv={bk}"
        expect(
            hbm.tensors["o"].dtype == dtype,
            "the output is not in the input dtype",
            input=label,
            expected=str(dtype),
            got=str(hbm.tensors["o"].dtype),
            hint='hbm.alloc("o", (N, d), q dtype) and store tiles cast back to it',
        )
        want = tiled_schedule_bytes(n, d, bq, q.element_size())
        expect_exact_int(
            hbm.bytes_moved,
            want,
            label + " (bytes counted by HBM)",
            "load each Q block once, every K and V block once per Q block, store each O block once; nothing else",
            "HBM traffic",
        )


@checks("tiled_attention")
def tiles_fit_the_blocks(ex):
    """measured by the checks' HBM: no load or store moves more than block_kv rows of K/V or block_q rows of Q/O"""
    for n, d, bq, bk in ((37, 4, 8, 5), (30, 2, 30, 7), (12, 3, 2, 12), (25, 8, 4, 1)):
        q, k, v = (torch.randn(n, d) for _ in range(3))
        hbm = run_tiled(ex, q, k, v, bq, bk)
        for name, block, what in (("k", bk, "block_kv"), ("v", bk, "block_kv"), ("q", bq, "block_q")):
            largest = hbm.largest_tile(name)
            expect(
                largest <= block,
                f"a tile of {name.upper()} larger than {what}: it would not fit the SRAM the block size budgets for",
                input=f"{describe(q=q)}, block_q={bq}, block_kv={bk}",
                expected=f"every hbm.load('{name}', ...) of at most {what}={block} rows",
                got=f"a load of {largest} rows (tiles loaded: {hbm.loaded_rows.get(name, [])[:12]})",
                hint=f"stream {name.upper()} through SRAM {what} rows at a time inside the loop: "
                "hbm.load(name, start, start + block); the online softmax is what makes that exact",
            )
        largest = hbm.largest_tile("o")
        expect(
            largest <= bq,
            "an O tile larger than block_q was stored",
            input=f"{describe(q=q)}, block_q={bq}, block_kv={bk}",
            expected=f"every hbm.store('o', ...) of at most block_q={bq} rows",
            got=f"a store of {largest} rows",
            hint="store each Q block's output once, when its K/V loop ends",
        )


@checks("tiled_attention")
def bf16_and_fp16_accumulate_in_float32(ex):
    """bf16 and fp16 inputs (N=200, several blocks): as accurate as SDPA in that dtype, so the sums run in float32"""
    n, d = 200, 16
    q, k, v = (torch.randn(n, d, dtype=torch.float64) for _ in range(3))
    for dtype in (torch.bfloat16, torch.float16):
        low = [t.to(dtype) for t in (q, k, v)]
        hbm = run_tiled(ex, *low, 32, 24)
        expect_close(
            hbm.tensors["o"],
            sdpa(*(t.double() for t in low)),
            baseline=sdpa(*low),
            dtype=dtype,
            input=describe(q=low[0]) + ", block_q=32, block_kv=24",
            hint="load the tiles .to(float32) (torch.promote_types(dtype, torch.float32)) and accumulate there",
        )


@checks("tiled_attention")
def refuses_empty_blocks(ex):
    """block_q or block_kv below 1 raises ValueError"""
    q, k, v = (torch.randn(6, 2) for _ in range(3))
    run_tiled(ex, q, k, v, 2, 2)  # first: it works at all
    for bq, bk in ((0, 4), (4, 0), (-2, 4)):
        expect_value_error(
            lambda bq=bq, bk=bk: ex.tiled_attention(RecordingHBM(q=q, k=k, v=v), bq, bk),
            f"block_q={bq}, block_kv={bk}",
            "check both block sizes first",
        )


# ------------------------------------------------------------------------------------------ tiled_attention_bytes

HINT_TILED_BYTES = "2*N*d (Q in, O out) + ceil(N / block_q) * 2*N*d (K and V per Q block), times element size and heads"


@checks("tiled_attention_bytes")
def matches_the_schedule_loop(ex):
    """random sizes, blocks that do and do not divide N, a block larger than N: equal to the loop over Q blocks"""
    rng = random.Random(torch.initial_seed())
    cases = [(1000, 128, 128, 2, 1), (1024, 64, 128, 2, 1), (7, 3, 100, 4, 1), (9, 2, 1, 4, 3)]
    cases += [
        (rng.randrange(1, 5000), rng.choice([32, 64, 128]), rng.randrange(1, 300), rng.choice([1, 2, 4]), 1)
        for _ in range(20)
    ]
    for n, d, bq, size, bh in cases:
        want = bh * tiled_schedule_bytes(n, d, bq, size)
        got = ex.tiled_attention_bytes(n, d, bq, size, bh)
        label = f"N={n}, d={d}, block_q={bq}, element {size} B, batch_heads={bh}"
        expect_exact_int(got, want, label, HINT_TILED_BYTES, "bytes")


@checks("tiled_attention_bytes")
def scales_with_heads_and_element_size(ex):
    """linear in batch_heads and element size; one Q block (block_q >= N) reads K and V exactly once: 4Nd elements"""
    for n, d, bq in ((37, 4, 8), (300, 64, 64), (5, 2, 5), (5, 2, 500)):
        one = tiled_schedule_bytes(n, d, bq, 1)
        for size, bh in ((1, 1), (2, 1), (4, 12), (2, 7)):
            got = ex.tiled_attention_bytes(n, d, bq, size, bh)
            label = f"N={n}, d={d}, block_q={bq}, element {size} B, batch_heads={bh}"
            expect_exact_int(got, bh * size * one, label, HINT_TILED_BYTES, "bytes")
    expect_exact_int(
        ex.tiled_attention_bytes(100, 8, 128, 2),
        4 * 100 * 8 * 2,
        "N=100, d=8, block_q=128 (one block), bf16",
        "one Q block: Q, K, V read once and O written once",
        "bytes",
    )


@checks("tiled_attention_bytes")
def below_standard_and_refusal(ex):
    """with block_q > 1 the tiled traffic is below the standard one's for N >= d; sizes below 1 raise ValueError"""
    for n, d, bq in ((1024, 64, 128), (8192, 128, 192), (4096, 128, 64)):
        tiled = ex.tiled_attention_bytes(n, d, bq, 2)
        standard = (4 * n * d + 4 * n * n) * 2
        expect(
            tiled < standard,
            "the tiled traffic is not below the standard implementation's",
            input=f"N={n}, d={d}, block_q={bq}, bf16",
            expected=f"< {standard:,}",
            got=f"{tiled:,}",
            hint=HINT_TILED_BYTES,
        )
    for args in ((0, 64, 16, 2, 1), (8, 64, 0, 2, 1), (8, 0, 4, 2, 1), (8, 64, 4, 0, 1), (8, 64, 4, 2, 0)):
        expect_value_error(
            lambda args=args: ex.tiled_attention_bytes(*args),
            "seq_len={}, head_dim={}, block_q={}, element_size={}, batch_heads={}".format(*args),
            "check every size >= 1 first",
        )
