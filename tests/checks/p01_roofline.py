"""Checks for p01.roofline. References: `torch.utils.flop_counter.FlopCounterMode` over `torch.mm` and over an eager
attention (matmuls, GQA by repeating the KV heads), the `nbytes` of the tensors each operation actually reads and
writes, closed forms for Llama-3-8B-sized operations, and the published dense peaks of NVIDIA's H100, H200, A100
and T4 datasheets for the roofline."""

import random

import torch
from torch.utils.flop_counter import FlopCounterMode

from llm_algo.check import Checks, describe, expect, expect_close, expect_value_error

checks = Checks("p01.roofline")
checks.restrict(
    "matmul_cost",
    "attention_cost",
    forbid=("torch.utils.flop_counter",),
    instead="count the FLOPs and bytes from the shapes (FlopCounterMode is the checks' reference)",
)

H100 = (989e12, 3.35e12)
GPUS = {"H100 SXM": H100, "H200 SXM": (989e12, 4.8e12), "A100 SXM 80GB": (312e12, 2.039e12), "T4": (65e12, 320e9)}


def expect_pair(got, want: tuple, label: str, hint: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in got),
        "expected a tuple of two ints (flops, bytes)",
        input=label,
        expected="(int, int)",
        got=repr(got)[:120],
        hint="return flops, bytes as exact integers",
    )
    for what, g, w in (("FLOPs", got[0], want[0]), ("bytes", got[1], want[1])):
        expect(g == w, f"wrong {what}", input=label, expected=f"{w:,}", got=f"{g:,} (ratio {g / w:.4g})", hint=hint)


def sample(shape, dtype):
    return torch.randn(shape).to(dtype)


# ------------------------------------------------------------------------------------------ matmul_cost

HINT_MM = "FLOPs = 2*M*N*K; bytes = (M*K + K*N + M*N) * element size (read A and B, write C)"


@checks("matmul_cost")
def matches_flop_counter_and_nbytes(ex):
    """odd shapes in four dtypes: FLOPs from FlopCounterMode over torch.mm, bytes from the three tensors' nbytes"""
    for (M, N, K), dtype in (
        ((5, 7, 3), torch.float64),
        ((37, 129, 64), torch.float32),
        ((1, 257, 129), torch.bfloat16),
        ((64, 33, 100), torch.float16),
    ):
        a, b = sample((M, K), dtype), sample((K, N), dtype)
        with FlopCounterMode(display=False) as counter:
            c = torch.mm(a, b)
        want = (counter.get_total_flops(), a.nbytes + b.nbytes + c.nbytes)
        expect_pair(ex.matmul_cost(M, N, K, dtype), want, describe(A=a, B=b), HINT_MM)


@checks("matmul_cost")
def square_and_decode_intensities(ex):
    """4096^3 in bf16 has intensity 4096/3 (compute-bound on an H100); a decode GEMV (M = 1) about 1"""
    flops, traffic = ex.matmul_cost(4096, 4096, 4096, torch.bfloat16)
    expect_pair((flops, traffic), (2 * 4096**3, 3 * 4096**2 * 2), "M = N = K = 4096, bfloat16", HINT_MM)
    flops, traffic = ex.matmul_cost(1, 4096, 4096, torch.bfloat16)
    want = (2 * 4096**2, (4096 + 4096**2 + 4096) * 2)
    expect_pair((flops, traffic), want, "M = 1 (one decoding token), N = K = 4096, bfloat16", HINT_MM)
    expect_close(
        torch.tensor(flops / traffic, dtype=torch.float64),
        torch.tensor(want[0] / want[1], dtype=torch.float64),
        input="decode GEMV intensity",
        what="FLOP/byte",
        hint=HINT_MM,
    )


@checks("matmul_cost")
def element_sizes_follow_the_dtype(ex):
    """the same product in fp8 (1 byte), bf16 (2), fp32 (4), fp64 (8): FLOPs equal, bytes in proportion"""
    for dtype, size in ((torch.float8_e4m3fn, 1), (torch.bfloat16, 2), (torch.float32, 4), (torch.float64, 8)):
        expect_pair(
            ex.matmul_cost(3, 11, 6, dtype),
            (2 * 3 * 11 * 6, (18 + 66 + 33) * size),
            f"M=3, N=11, K=6, {dtype}",
            "bytes = elements * torch.empty((), dtype=dtype).element_size()",
        )


@checks("matmul_cost")
def refuses_empty_sizes(ex):
    """a zero or negative size raises ValueError"""
    ex.matmul_cost(2, 2, 2, torch.float32)  # first: it works at all
    for args in ((0, 4, 4), (4, -1, 4), (4, 4, 0)):
        try:
            result = ex.matmul_cost(*args, torch.float32)
        except ValueError:
            continue
        expect(
            False,
            "an empty matrix size was accepted",
            input=f"matmul_cost{args}",
            expected="ValueError",
            got=repr(result),
            hint="check min(M, N, K) >= 1",
        )


# ------------------------------------------------------------------------------------------ attention_cost

HINT_ATT = (
    "FLOPs = 4 * B * H * Tq * Tkv * d (query heads); bytes = (2 * B * H * Tq * d + 2 * B * Hkv * Tkv * d) * element "
    "size: Q read and O written with H heads, K and V read with the KV heads"
)


def eager_attention(q, k, v):
    """Q (B, H, Tq, d), K and V (B, Hkv, Tkv, d): the matmuls FlopCounterMode counts."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)  # (B, H, Tkv, d)
    scores = torch.matmul(q, k.transpose(-1, -2)) / q.shape[-1] ** 0.5  # (B, H, Tq, Tkv)
    return torch.matmul(scores.float().softmax(-1).to(q.dtype), v)  # (B, H, Tq, d)


@checks("attention_cost")
def eager_attention_flops_and_nbytes(ex):
    """GQA, MQA and MHA, prefill and decode shapes: FlopCounterMode over eager attention, nbytes of Q, K, V and O"""
    cases = [
        ((2, 8, 2, 5, 7, 16), torch.float32),
        ((1, 4, 4, 1, 33, 8), torch.bfloat16),
        ((3, 6, 1, 9, 9, 12), torch.float16),
        ((1, 4, 2, 1, 1, 4), torch.float64),
    ]
    for (B, H, K, Tq, Tkv, d), dtype in cases:
        q, k, v = sample((B, H, Tq, d), dtype), sample((B, K, Tkv, d), dtype), sample((B, K, Tkv, d), dtype)
        with FlopCounterMode(display=False) as counter:
            out = eager_attention(q, k, v)
        want = (counter.get_total_flops(), q.nbytes + k.nbytes + v.nbytes + out.nbytes)
        label = f"batch={B}, q_heads={H}, kv_heads={K}, q_len={Tq}, kv_len={Tkv}, head_dim={d}, {dtype}"
        expect_pair(ex.attention_cost(B, H, K, Tq, Tkv, d, dtype), want, label, HINT_ATT)


@checks("attention_cost")
def llama3_8b_prefill_and_decode(ex):
    """32 query / 8 KV heads of 128 over 8192 tokens in bf16: prefill compute-bound, decode intensity about H/K = 4"""
    prefill = ex.attention_cost(1, 32, 8, 8192, 8192, 128, torch.bfloat16)
    want = (4 * 32 * 8192 * 8192 * 128, (2 * 32 * 8192 * 128 + 2 * 8 * 8192 * 128) * 2)
    expect_pair(prefill, want, "prefill: batch 1, 32/8 heads, 8192 x 8192, d=128, bf16", HINT_ATT)
    decode = ex.attention_cost(4, 32, 8, 1, 8192, 128, torch.bfloat16)
    want = (4 * 4 * 32 * 8192 * 128, (2 * 4 * 32 * 128 + 2 * 4 * 8 * 8192 * 128) * 2)
    expect_pair(decode, want, "decode: batch 4, 32/8 heads, 1 query x 8192 keys, d=128, bf16", HINT_ATT)


@checks("attention_cost")
def grouping_saves_bytes_not_flops(ex):
    """with 16 query heads, 16 -> 4 -> 1 KV heads: FLOPs unchanged, K/V bytes shrink in proportion"""
    results = {kv: ex.attention_cost(2, 16, kv, 3, 50, 8, torch.float32) for kv in (16, 4, 1)}
    for kv, (flops, traffic) in results.items():
        want = (4 * 2 * 16 * 3 * 50 * 8, (2 * 2 * 16 * 3 * 8 + 2 * 2 * kv * 50 * 8) * 4)
        expect_pair(
            (flops, traffic),
            want,
            f"batch 2, 16 query heads, {kv} KV heads, Tq=3, Tkv=50, d=8, float32",
            "every query head computes its own scores (FLOPs use H); only K and V shrink with fewer KV heads",
        )


@checks("attention_cost")
def refuses_impossible_shapes(ex):
    """kv_heads that do not divide q_heads, or a zero length, raise ValueError"""
    ex.attention_cost(1, 4, 2, 3, 3, 8, torch.float32)  # first: it works at all
    for args in ((1, 6, 4, 3, 3, 8), (1, 4, 2, 0, 3, 8), (1, 4, 2, 3, 3, 0), (0, 4, 2, 3, 3, 8)):
        expect_value_error(
            lambda args=args: ex.attention_cost(*args, torch.float32),
            f"attention_cost{args}",
            "sizes >= 1 and q_heads % kv_heads == 0",
        )


# ------------------------------------------------------------------------------------------ roofline_bound


def expect_bound(got, want_seconds: float, want_bound: str, label: str, hint: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "expected (seconds, bound)",
        input=label,
        expected="a tuple of two",
        got=repr(got)[:120],
        hint="return seconds, 'compute' or 'memory'",
    )
    expect(
        got[1] == want_bound,
        "wrong side of the ridge",
        input=label,
        expected=repr(want_bound),
        got=repr(got[1]),
        hint=hint,
    )
    expect_close(
        torch.tensor(float(got[0]), dtype=torch.float64),
        torch.tensor(want_seconds, dtype=torch.float64),
        input=label,
        what="seconds",
        hint=hint,
    )


HINT_ROOF = "t = max(flops / peak, bytes / bandwidth); 'compute' when flops / peak >= bytes / bandwidth"


@checks("roofline_bound")
def llm_operations_on_an_h100(ex):
    """H100 (989 TFLOP/s, 3.35 TB/s): 4096^3 GEMM compute-bound in 139 us; decode GEMV memory-bound in 10 us"""
    cases = [
        ("GEMM 4096^3 bf16", 2 * 4096**3, 3 * 4096**2 * 2, 2 * 4096**3 / 989e12, "compute"),
        ("GEMV 1x4096x4096 bf16", 2 * 4096**2, (2 * 4096 + 4096**2) * 2, (2 * 4096 + 4096**2) * 2 / 3.35e12, "memory"),
        ("residual add of 8192x4096 bf16", 8192 * 4096, 3 * 2 * 8192 * 4096, 3 * 2 * 8192 * 4096 / 3.35e12, "memory"),
    ]
    for name, flops, traffic, seconds, bound in cases:
        expect_bound(ex.roofline_bound(flops, traffic, *H100), seconds, bound, f"{name} on an H100 SXM", HINT_ROOF)


@checks("roofline_bound")
def ridge_points_of_four_gpus(ex):
    """exactly at each GPU's ridge (peak / bandwidth FLOP/byte) is compute-bound; 1% below it memory-bound"""
    for gpu, (peak, bandwidth) in GPUS.items():
        # one second of each: exactly peak FLOPs over exactly bandwidth bytes (no rounding in either division)
        expect_bound(
            ex.roofline_bound(peak, bandwidth, peak, bandwidth),
            1.0,
            "compute",
            f"{gpu}: flops = peak, bytes = bandwidth (intensity = ridge {peak / bandwidth:.1f} FLOP/B)",
            HINT_ROOF + " (a tie is compute-bound)",
        )
        expect_bound(
            ex.roofline_bound(0.99 * peak, bandwidth, peak, bandwidth),
            1.0,
            "memory",
            f"{gpu}: intensity 1% below the ridge",
            HINT_ROOF,
        )


@checks("roofline_bound")
def random_operations(ex):
    """random FLOPs and bytes over ten decades: the larger of the two times, and its roof"""
    rng = random.Random(torch.initial_seed())
    for _ in range(30):
        flops, traffic = 10 ** rng.uniform(3, 14), 10 ** rng.uniform(3, 12)
        peak, bandwidth = rng.choice(list(GPUS.values()))
        compute, memory = flops / peak, traffic / bandwidth
        want = (compute, "compute") if compute >= memory else (memory, "memory")
        expect_bound(
            ex.roofline_bound(flops, traffic, peak, bandwidth),
            *want,
            f"flops={flops:.4g}, bytes={traffic:.4g}, peak={peak:g}, bandwidth={bandwidth:g}",
            HINT_ROOF + " (not their sum: compute and memory traffic overlap)",
        )
    expect_bound(ex.roofline_bound(0, 1000, *H100), 1000 / 3.35e12, "memory", "flops=0 (a pure copy)", HINT_ROOF)
    expect_bound(ex.roofline_bound(1e6, 0, *H100), 1e6 / 989e12, "compute", "bytes=0 (data already on chip)", HINT_ROOF)


@checks("roofline_bound")
def refuses_bad_devices(ex):
    """a non-positive peak or bandwidth, negative work, or no work at all raise ValueError"""
    ex.roofline_bound(1.0, 1.0, 1.0, 1.0)  # first: it works at all
    for args in (
        (1e9, 1e6, 0.0, 1e12),
        (1e9, 1e6, 1e12, -1.0),
        (1e9, 1e6, 1e12, 0.0),
        (-1.0, 1e6, 1e12, 1e12),
        (1e9, -5.0, 1e12, 1e12),
        (0.0, 0.0, 1e12, 1e12),
    ):
        expect_value_error(
            lambda args=args: ex.roofline_bound(*args),
            f"roofline_bound{args}",
            "check peak > 0, bandwidth > 0, work >= 0 and not all 0",
        )
