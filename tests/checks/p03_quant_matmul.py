"""Checks for p03.quant_matmul. References: a float64 dequantise-then-matmul written here (codes times the scale of
their group, reshaped per group, then `torch.einsum`), an int4 unpacking written here bit by bit on int16 (not the
kernel's shift-and-sign-extend), the same product computed in the input dtype by torch as the error baseline, and
guard elements around the output (llm_algo.references.kernels). Codes and scales are random and the scales differ
from group to group, so a kernel that reads the wrong group, nibble or stride gets a wrong answer."""

import torch

from llm_algo.bench import bandwidth_row, baseline_rows, copy_row, flops_row
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor
from llm_algo.check.restrictions import MATMUL
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p03.quant_matmul", triton=True)
QUANT_MATMULS = tuple(
    getattr(torch, name)
    for name in ("_weight_int8pack_mm", "_weight_int4pack_mm", "_scaled_mm", "_int_mm")
    if hasattr(torch, name)
)
checks.restrict(
    "int8_matmul",
    "int4_matmul",
    "fp8_matmul",
    kernel=True,
    forbid=(*MATMUL, *QUANT_MATMULS),
    instead="dequantise the weight tile in registers and multiply with tl.dot in your @triton.jit kernel "
    "(torch's matmuls are the checks' reference)",
)
HINT_K_MASK = "mask every load along K (x, codes and scales) with k < K"
HINT_OWN_STRIDES = "read every operand through its own strides: pass each tensor's .stride(i), never another's"
HINT_GROUP = "element (n, k) uses scales[n, k // G]: index the scale tile with k // GROUP_SIZE and stride_sg"


# ------------------------------------------------------------------------------------------------ references


def dequant_spec(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float64 (N, K) weight: each row split into K // G groups of G codes, each group times its own scale."""
    N, K = codes.shape
    groups = scales.shape[1]
    return (codes.double().cpu().reshape(N, groups, K // groups) * scales.double().cpu()[:, :, None]).reshape(N, K)


def oracle(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return torch.einsum("mk,nk->mn", x.double().cpu(), dequant_spec(codes, scales))


def baseline(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """What a torch user writes: dequantise (in float32, rounded once to x's dtype), then x @ W^T in x's dtype: the
    error yardstick, since the dequantised weight's rounding to fp16 is most of the error."""
    G = codes.shape[1] // scales.shape[1]
    w = (codes.float() * scales.float().repeat_interleave(G, dim=1)).to(x.dtype)
    return x @ w.T


def unpack_spec(packed: torch.Tensor) -> torch.Tensor:
    """int8 codes (N, K) from bytes (N, K // 2), bit by bit: code 2j is bits 0-3 of byte j, code 2j+1 bits 4-7; a
    4-bit two's complement number is -8 * bit3 + 4 * bit2 + 2 * bit1 + bit0."""
    b = packed.to(torch.int16).cpu()
    out = torch.empty(b.shape[0], 2 * b.shape[1], dtype=torch.int16)
    for half, shift in ((0, 0), (1, 4)):
        bits = [(b >> (shift + i)) & 1 for i in range(4)]
        out[:, half::2] = bits[0] + 2 * bits[1] + 4 * bits[2] - 8 * bits[3]
    return out.to(torch.int8)


def pack_spec(codes: torch.Tensor) -> torch.Tensor:
    """The inverse of unpack_spec, in plain arithmetic: byte j = (code 2j mod 16) + 16 * (code 2j+1 mod 16)."""
    c = codes.to(torch.int16).cpu() % 16
    return (c[:, 0::2] + 16 * c[:, 1::2]).to(torch.uint8)


def random_scales(N: int, groups: int, dtype=torch.float32) -> torch.Tensor:
    """Positive scales that differ a lot from group to group (1e-3 to 3e-2): a wrong group index shows."""
    return (torch.rand(N, groups) * 0.029 + 0.001).to(dtype).to(triton_device())


def int8_problem(M, N, K, G, dtype, scale_dtype=torch.float32):
    x = torch.randn(M, K).to(dtype).to(triton_device())
    codes = torch.randint(-127, 128, (N, K), dtype=torch.int8).to(triton_device())
    return x, codes, random_scales(N, K // G, scale_dtype)


def int4_problem(M, N, K, G, dtype, scale_dtype=torch.float32):
    x = torch.randn(M, K).to(dtype).to(triton_device())
    codes = torch.randint(-8, 8, (N, K), dtype=torch.int8)
    return x, codes, pack_spec(codes).to(triton_device()), random_scales(N, K // G, scale_dtype)


def expect_product(got, x, codes, scales, label, hint):
    expect_tensor(got, shape=(x.shape[0], codes.shape[0]), dtype=x.dtype, device=x.device.type, input=label)
    expect_close(
        got, oracle(x, codes, scales), baseline=baseline(x, codes.to(x.device), scales), input=label, hint=hint
    )


def int8_window_problem(M, N, K, G):
    """x, codes and scales as windows of larger random buffers (reads past them land in memory the check owns)."""
    x = random_window((M, K), (3, 21), device=triton_device())
    codes_buf = torch.randint(-127, 128, (N + 5, K + 19), dtype=torch.int8).to(triton_device())
    codes = codes_buf[:N, :K]
    return x, codes, scale_window(N, K // G)


def scale_window(N: int, groups: int) -> torch.Tensor:
    """Positive scales (N, groups) as a window of a larger buffer (rows groups + 3 apart)."""
    return (torch.rand(N + 4, groups + 3) * 0.029 + 0.001).to(triton_device())[:N, :groups]


# ------------------------------------------------------------------------------------------------ int8_matmul


@checks("int8_matmul", gate=True)
def int8_kernel_stays_inside_its_output(ex):
    """w8_matmul_kernel on windows: M=19 N=37 K=80 G=16 with 16 x 16 x 32 tiles (ragged on every axis)"""
    M, N, K, G = 19, 37, 80, 16
    x, codes, scales = int8_window_problem(M, N, K, G)
    buffer, window = guarded((N, M), (5, 7), device=triton_device())
    y = window.T  # (M, N) column-major: the store must use both strides
    ex.w8_matmul_kernel[(-(-N // 16), -(-M // 16))](
        x, codes, scales, y, M, N, K, G,
        *x.stride(), *codes.stride(), *scales.stride(), *y.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=32,
    )  # fmt: skip
    label = f"x (19, 80), codes (37, 80), scales (37, 5) windows of larger buffers, y (19, 37) a column-major window of a NaN buffer, G={G}"
    expect_guard_untouched(buffer, (N, M), input=label, hint="mask the store (rows < M, columns < N); use both strides")
    expect_close(y, oracle(x, codes, scales), input=label, hint=HINT_K_MASK + "; " + HINT_GROUP)


@checks("int8_matmul")
def int8_hand_checkable(ex):
    """x = [[1, 2, 3, 4]], codes [[1, 1, 1, 1], [2, 0, -1, 3]], G = 2, scales [[1, 10], [0.5, 2]] -> [[73, 19]]"""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], device=triton_device())
    codes = torch.tensor([[1, 1, 1, 1], [2, 0, -1, 3]], dtype=torch.int8, device=triton_device())
    scales = torch.tensor([[1.0, 10.0], [0.5, 2.0]], device=triton_device())
    expect_close(
        ex.int8_weight_matmul(x, codes, scales, group_size=2),
        torch.tensor([[73.0, 19.0]], dtype=torch.float64),
        input="x=[[1, 2, 3, 4]], codes=[[1, 1, 1, 1], [2, 0, -1, 3]], scales=[[1, 10], [0.5, 2]], G=2",
        hint="y[0, 0] = 1*(1*1 + 2*1) + 10*(3*1 + 4*1) = 73, y[0, 1] = 0.5*(1*2 + 2*0) + 2*(3*(-1) + 4*3) = 19: "
        "columns 0-1 use scales[:, 0], columns 2-3 scales[:, 1]",
    )


@checks("int8_matmul")
def int8_shapes_groups_and_dtypes(ex):
    """per-channel (G = K) and group scales G = 1, 16, 32; M = 1, 3, 5, 33; N, K off the tile; fp32 and fp16"""
    for dtype in triton_dtypes():
        for M, N, K, G in ((1, 40, 64, 64), (5, 33, 96, 32), (33, 17, 48, 16), (3, 10, 16, 1)):
            x, codes, scales = int8_problem(M, N, K, G, dtype)
            label = f"{describe(x=x)}, codes ({N}, {K}) int8, scales ({N}, {K // G}), G={G}"
            got = ex.int8_weight_matmul(x, codes, scales, group_size=G)
            expect_product(got, x, codes, scales, label, hint=HINT_GROUP + "; " + HINT_K_MASK)


@checks("int8_matmul")
def int8_per_channel_default_and_scale_dtype(ex):
    """group_size=None means one scale per row (scales (N, 1)); scales in x's dtype (fp16) work too"""
    x, codes, scales = int8_problem(6, 24, 72, 72, torch.float32)
    got = ex.int8_weight_matmul(x, codes, scales)
    expect_product(got, x, codes, scales, "x (6, 72), scales (24, 1), group_size=None", hint="None means G = K")
    dtype = triton_dtypes()[-1]
    x, codes, scales = int8_problem(4, 40, 64, 16, dtype, scale_dtype=dtype)
    got = ex.int8_weight_matmul(x, codes, scales, group_size=16)
    expect_product(
        got, x, codes, scales, f"{describe(x=x)}, scales {dtype}", hint="convert scales to float32 in the kernel"
    )


@checks("int8_matmul")
def int8_strided_inputs(ex):
    """x transposed or sliced; codes and scales sliced, or column-major (K-stride != 1): strides from .stride(i)"""
    M, N, K, G = 7, 24, 64, 16
    d = triton_device()
    cases = [
        (
            "x = t.T, codes a column slice, scales every other row",
            torch.randn(K, M).to(d).T,
            torch.randint(-127, 128, (N, 2 * K), dtype=torch.int8).to(d)[:, K:],
            random_scales(2 * N, K // G)[1::2],
        ),
        (
            "x = t[:, ::2], codes and scales column-major (transposed views)",
            torch.randn(M, 2 * K).to(d)[:, ::2],
            torch.randint(-127, 128, (K, N), dtype=torch.int8).to(d).T,
            random_scales(K // G, N).T,
        ),
    ]
    for label, x, codes, scales in cases:
        got = ex.int8_weight_matmul(x, codes, scales, group_size=G)
        full = f"{label}: strides x{x.stride()} codes{codes.stride()} scales{scales.stride()}"
        expect_product(got, x, codes, scales, full, hint="pass every stride of x, qweight and scales to the kernel")


@checks("int8_matmul")
def int8_operands_in_their_own_layouts(ex):
    """x, codes and scales each in a layout of its own (a fused slice, padded rows, transposed storage, and the
    same in another order), same values as contiguous copies"""
    M, N, K, G = 7, 24, 64, 16
    for order in (None, ("transposed", "outer_padded", "fused_slice")):
        x, codes, scales = int8_problem(M, N, K, G, triton_dtypes()[-1])
        lx, lc, ls = distinct_layouts(x, codes, scales, order=order)
        expect_own_layouts(lx, lc, ls)
        label = f"{describe(x=x)}, G={G}, strides x {lx.stride()}, codes {lc.stride()}, scales {ls.stride()}"
        got = ex.int8_weight_matmul(lx, lc, ls, group_size=G)
        expect_product(got, x, codes, scales, label, hint=HINT_OWN_STRIDES)


@checks("int8_matmul")
def int8_refuses_bad_input(ex):
    """K not a multiple of G, wrong K, wrong scale shape, float or uint8 codes, integer x or scales are refused"""
    d = triton_device()
    x = torch.randn(3, 64, device=d)
    codes = torch.randint(-127, 128, (8, 64), dtype=torch.int8, device=d)
    s4 = torch.rand(8, 4, device=d)
    cases = [
        ("G=24 does not divide K=64", lambda: ex.int8_weight_matmul(x, codes, torch.rand(8, 2, device=d), 24)),
        ("G=0", lambda: ex.int8_weight_matmul(x, codes, s4, 0)),
        ("x K=64, codes (8, 32), scales (8, 4)", lambda: ex.int8_weight_matmul(x, codes[:, :32], s4, 16)),
        ("codes (8, 64, 1)", lambda: ex.int8_weight_matmul(x, codes[:, :, None], s4, 16)),
        ("x float64", lambda: ex.int8_weight_matmul(x.double(), codes, s4, 16)),
        ("scales (8, 2) for G=16 (needs (8, 4))", lambda: ex.int8_weight_matmul(x, codes, s4[:, :2], 16)),
        ("scales (4, 4) for N=8", lambda: ex.int8_weight_matmul(x, codes, s4[:4], 16)),
        ("codes float32", lambda: ex.int8_weight_matmul(x, codes.float(), s4, 16)),
        ("codes uint8", lambda: ex.int8_weight_matmul(x, codes.to(torch.uint8), s4, 16)),
        ("x int32", lambda: ex.int8_weight_matmul(x.to(torch.int32), codes, s4, 16)),
        ("scales int32", lambda: ex.int8_weight_matmul(x, codes, torch.ones(8, 4, dtype=torch.int32, device=d), 16)),
        ("x 1-D", lambda: ex.int8_weight_matmul(x[0], codes, s4, 16)),
    ]
    for label, call in cases:
        expect_refused(
            call,
            input=label,
            hint="validate dtypes (TypeError), K, the group size and the scales' shape (ValueError) first",
            errors=(ValueError, TypeError),
        )


@checks("int8_matmul", requires_compiled=True)
def int8_decode_and_prefill_shapes(ex):
    """M = 1 and 16 at K = N = 4096 (G = 128 and per channel), M = 300 x 1000 x 2048: GPU-sized shapes"""
    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K, G in ((1, 4096, 4096, 128), (16, 4096, 4096, 4096), (300, 1000, 2048, 64)):
            x, codes, scales = int8_problem(M, N, K, G, dtype, scale_dtype=dtype)
            got = ex.int8_weight_matmul(x, codes, scales, group_size=G)
            expect_product(got, x, codes, scales, f"{describe(x=x)}, N={N}, G={G}", hint=HINT_GROUP)


# ------------------------------------------------------------------------------------------------ int4_matmul


@checks("int4_matmul", gate=True)
def int4_kernel_stays_inside_its_output(ex):
    """w4_matmul_kernel on windows: M=19 N=37 K=80 G=16 with 16 x 16 x 32 tiles; packed (37, 40) of a larger buffer"""
    M, N, K, G = 19, 37, 80, 16
    x = random_window((M, K), (3, 21), device=triton_device())
    codes = torch.randint(-8, 8, (N + 5, K + 20), dtype=torch.int8)
    packed = pack_spec(codes).to(triton_device())[:N, : K // 2]
    scales = scale_window(N, K // G)
    buffer, window = guarded((N, M), (5, 7), device=triton_device())
    y = window.T  # (M, N) column-major: the store must use both strides
    ex.w4_matmul_kernel[(-(-N // 16), -(-M // 16))](
        x, packed, scales, y, M, N, K, G,
        *x.stride(), *packed.stride(), *scales.stride(), *y.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=32,
    )  # fmt: skip
    label = f"x (19, 80), packed (37, 40), scales (37, 5) windows of larger buffers, y (19, 37) a column-major window of a NaN buffer, G={G}"
    expect_guard_untouched(buffer, (N, M), input=label, hint="mask the store (rows < M, columns < N); use both strides")
    expect_close(
        y, oracle(x, unpack_spec(packed), scales), input=label, hint="byte k // 2, masked with k < K; " + HINT_GROUP
    )


@checks("int4_matmul")
def int4_hand_checkable(ex):
    """bytes [[0xE3, 0x8F]] = codes [3, -2, -1, -8], scale 0.5: x = the 4 one-hot rows and a row of ones"""
    d = triton_device()
    packed = torch.tensor([[0xE3, 0x8F]], dtype=torch.uint8, device=d)
    scales = torch.tensor([[0.5]], device=d)
    x = torch.cat((torch.eye(4), torch.ones(1, 4))).to(d)  # row k picks code k; the last row sums them
    expect_close(
        ex.int4_weight_matmul(x, packed, scales, 4),
        torch.tensor([[1.5], [-1.0], [-0.5], [-4.0], [-4.0]], dtype=torch.float64),
        input="packed [[0xE3, 0x8F]] (codes 3, -2, -1, -8), scale 0.5, x = [I_4; 1 1 1 1]",
        hint="code 2j is the low nibble of byte j, code 2j+1 the high one; nibbles >= 8 are negative (subtract 16)",
    )


@checks("int4_matmul")
def int4_shapes_groups_and_dtypes(ex):
    """G = 1, 8, 32 and per channel; M = 1, 3, 5, 33; N, K off the tile; fp32 and fp16; every code -8..7"""
    for dtype in triton_dtypes():
        for M, N, K, G in ((1, 40, 64, 64), (5, 33, 96, 32), (33, 17, 48, 8), (3, 10, 16, 1)):
            x, codes, packed, scales = int4_problem(M, N, K, G, dtype)
            label = f"{describe(x=x)}, packed ({N}, {K // 2}) uint8, scales ({N}, {K // G}), G={G}"
            got = ex.int4_weight_matmul(x, packed, scales, G)
            expect_product(got, x, codes, scales, label, hint=HINT_GROUP + " (k is the unpacked column, not k // 2)")


@checks("int4_matmul")
def int4_scale_dtype_and_strided_inputs(ex):
    """scales in x's dtype; x transposed; packed and scales sliced views, then column-major"""
    dtype = triton_dtypes()[-1]
    x, codes, packed, scales = int4_problem(4, 40, 64, 16, dtype, scale_dtype=dtype)
    got = ex.int4_weight_matmul(x, packed, scales, 16)
    expect_product(got, x, codes, scales, f"{describe(x=x)}, scales {dtype}", hint="convert scales to float32")
    M, N, K, G = 7, 24, 64, 16
    x = torch.randn(K, M).to(triton_device()).T
    codes = torch.randint(-8, 8, (2 * N, K), dtype=torch.int8)[::2]
    packed = pack_spec(torch.cat((codes, codes), dim=1)).to(triton_device())[:, K // 2 :]
    scales = random_scales(N, 2 * K // G)[:, ::2]
    got = ex.int4_weight_matmul(x, packed, scales, G)
    label = f"x = t.T, packed a slice with strides {packed.stride()}, scales with strides {scales.stride()}"
    expect_product(got, x, codes, scales, label, hint="pass every stride of x, packed and scales to the kernel")
    packed = pack_spec(codes).T.contiguous().T.to(triton_device())  # column-major bytes: stride_pk = N
    scales = random_scales(K // G, N).T
    got = ex.int4_weight_matmul(x, packed, scales, G)
    label = f"x = t.T, packed and scales column-major: strides {packed.stride()}, {scales.stride()}"
    expect_product(got, x, codes, scales, label, hint="byte k // 2 is at (k // 2) * stride_pk, not k // 2")


@checks("int4_matmul")
def int4_operands_in_their_own_layouts(ex):
    """x, the packed bytes and the scales each in a layout of its own (a fused slice, padded rows, transposed
    storage, and the same in another order), same values as contiguous copies"""
    M, N, K, G = 7, 24, 64, 16
    for order in (None, ("outer_padded", "transposed", "padded")):
        x, codes, packed, scales = int4_problem(M, N, K, G, triton_dtypes()[-1])
        lx, lp, ls = distinct_layouts(x, packed, scales, order=order)
        expect_own_layouts(lx, lp, ls)
        label = f"{describe(x=x)}, G={G}, strides x {lx.stride()}, packed {lp.stride()}, scales {ls.stride()}"
        got = ex.int4_weight_matmul(lx, lp, ls, G)
        expect_product(got, x, codes, scales, label, hint=HINT_OWN_STRIDES)


@checks("int4_matmul")
def int4_refuses_bad_input(ex):
    """odd K, packed of the wrong shape or dtype (int8 codes are not packed int4), G not dividing K, bad scales"""
    d = triton_device()
    x = torch.randn(3, 64, device=d)
    packed = torch.randint(0, 256, (8, 32), dtype=torch.uint8, device=d)
    s4 = torch.rand(8, 4, device=d)
    cases = [
        ("packed (8, 64): unpacked width", lambda: ex.int4_weight_matmul(x, packed.repeat(1, 2), s4, 16)),
        ("packed (8, 16) for K=64", lambda: ex.int4_weight_matmul(x, packed[:, :16], s4, 16)),
        ("packed (8, 32, 1)", lambda: ex.int4_weight_matmul(x, packed[:, :, None], s4, 16)),
        ("packed int8", lambda: ex.int4_weight_matmul(x, packed.to(torch.int8), s4, 16)),
        ("packed int32", lambda: ex.int4_weight_matmul(x, packed.to(torch.int32), s4, 16)),
        ("G=24 does not divide K=64", lambda: ex.int4_weight_matmul(x, packed, torch.rand(8, 2, device=d), 24)),
        ("G=-16", lambda: ex.int4_weight_matmul(x, packed, s4, -16)),
        ("G=0", lambda: ex.int4_weight_matmul(x, packed, s4, 0)),
        ("x K=63 (odd)", lambda: ex.int4_weight_matmul(x[:, :63], packed[:, :31], torch.rand(8, 1, device=d), 63)),
        ("scales (8, 8) for G=16", lambda: ex.int4_weight_matmul(x, packed, torch.rand(8, 8, device=d), 16)),
        ("scales int32", lambda: ex.int4_weight_matmul(x, packed, torch.ones(8, 4, dtype=torch.int32, device=d), 16)),
        ("x float64", lambda: ex.int4_weight_matmul(x.double(), packed, s4, 16)),
    ]
    for label, call in cases:
        expect_refused(
            call,
            input=label,
            hint="validate dtypes (TypeError), the packed shape (N, K // 2) and the group size (ValueError) first",
            errors=(ValueError, TypeError),
        )


@checks("int4_matmul", requires_compiled=True)
def int4_decode_and_prefill_shapes(ex):
    """M = 1 and 16 at K = N = 4096 with G = 128, M = 300 x 1000 x 2048 with G = 32: GPU-sized shapes"""
    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K, G in ((1, 4096, 4096, 128), (16, 4096, 4096, 128), (300, 1000, 2048, 32)):
            x, codes, packed, scales = int4_problem(M, N, K, G, dtype, scale_dtype=dtype)
            got = ex.int4_weight_matmul(x, packed, scales, G)
            expect_product(got, x, codes, scales, f"{describe(x=x)}, N={N}, G={G}", hint=HINT_GROUP)


# ------------------------------------------------------------------------------------------------ fp8_quantize

E4M3_MAX = 448.0


def e4m3_grid() -> tuple[torch.Tensor, torch.Tensor]:
    """(values, codes): every finite E4M3FN value in float64, from the 256 bit patterns, and its code."""
    codes = torch.arange(256, dtype=torch.int64)
    values = codes.to(torch.uint8).view(torch.float8_e4m3fn).double()
    finite = values.isfinite()
    return values[finite], codes[finite]


def nearest_e4m3(v: torch.Tensor) -> torch.Tensor:
    """Round float64 values (already inside [-448, 448]) to the nearest E4M3 value, ties to the even code; searched
    over the table of all codes, independent of torch's cast."""
    values, codes = e4m3_grid()
    flat = v.double().reshape(-1, 1)
    dist = (flat - values[None, :]).abs()
    best = dist.min(dim=1, keepdim=True).values
    tied = dist == best
    prefer_even = tied & (codes[None, :] % 2 == 0)
    choice = torch.where(prefer_even.any(dim=1, keepdim=True), prefer_even, tied).to(torch.int64).argmax(dim=1)
    out = values[choice].reshape(v.shape)
    return torch.where(out == 0, torch.zeros_like(out), out)  # -0 and +0 compare equal anyway


def expect_fp8_codes(codes, scale, t, want_scale, label, hint):
    expect_tensor(codes, shape=tuple(t.shape), dtype=torch.float8_e4m3fn, input=label)
    expect_tensor(scale, shape=(t.shape[0], 1), dtype=torch.float32, input=label)
    expect_close(
        scale.double(), want_scale.double(), input=label + ": the scale", hint="scale = max|row| / 448 in fp32"
    )
    want = nearest_e4m3((t.float() / want_scale.float()).double().clamp(-E4M3_MAX, E4M3_MAX))
    got = codes.double()
    bad = (got != want).nonzero()
    expect(
        len(bad) == 0,
        f"{len(bad)} of {t.numel()} codes are not the nearest E4M3 value of t / scale",
        input=label,
        expected=f"at {tuple(bad[0].tolist())}: {want[tuple(bad[0])].item()}" if len(bad) else "",
        got=f"{got[tuple(bad[0])].item()}" if len(bad) else "",
        hint=hint,
    )
    cast = (t.float() / want_scale.float()).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).double()
    expect(bool((got == cast).all()), "codes differ from torch's float8_e4m3fn cast", input=label, hint=hint)


@checks("fp8_quantize")
def fp8_rowwise_scales_and_codes(ex):
    """row-wise amax / 448 and nearest-E4M3 codes for (5, 64) float32, (3, 33) float16, (4, 17) bfloat16 inputs"""
    for shape, dtype in (((5, 64), torch.float32), ((3, 33), torch.float16), ((4, 17), torch.bfloat16)):
        t = (torch.randn(shape) * torch.logspace(-3, 3, shape[0])[:, None]).to(dtype)
        t[0, 3] = -t[0].abs().max() * 2  # the largest magnitude of a row is negative
        codes, scale = ex.quantize_fp8_rowwise(t)
        want_scale = t.float().abs().amax(dim=1, keepdim=True) / E4M3_MAX
        label = describe(t=t)
        expect_fp8_codes(codes, scale, t, want_scale, label, hint="codes = (t / scale).clamp(-448, 448) cast to fp8")
        expect(
            bool((codes.float().abs().amax(dim=1) == E4M3_MAX).all()),
            "the largest |code| of every row must be exactly 448: the scale maps the row's max |t| onto it",
            input=label,
            got=codes.float().abs().amax(dim=1).tolist(),
            hint="amax is max(|t|) over the row (abs first), divided by 448",
        )


@checks("fp8_quantize")
def fp8_given_scale_saturates(ex):
    """a given (static) scale, returned as float32: values past 448 * scale saturate to +-448, not NaN"""
    t = torch.randn(6, 40) * 3
    t[1, :4] = torch.tensor([1e4, -1e4, float("inf"), 470.0 * 0.01])
    scale = torch.full((6, 1), 0.01, dtype=torch.float64)
    codes, got_scale = ex.quantize_fp8_rowwise(t, scale)
    label = "t (6, 40) ~ N(0, 9) with 1e4, -1e4, inf and 4.7 in row 1, given float64 scale 0.01 (saturation at 4.48)"
    expect(not bool(codes.float().isnan().any()), "NaN codes: clamp to [-448, 448] before the cast", input=label)
    expect_fp8_codes(codes, got_scale, t, scale, label, hint="use the given scale, clamp to +-448, then cast")


@checks("fp8_quantize")
def fp8_quantize_inputs_in_their_own_layouts(ex):
    """t a slice of a fused projection, then t transposed with a given scale that is a column of a wider tensor:
    the same codes and scales as for contiguous copies"""
    t = torch.randn(6, 40) * torch.logspace(-2, 2, 6)[:, None]
    (lt,) = distinct_layouts(t)
    codes, scale = ex.quantize_fp8_rowwise(lt)
    want_scale = t.abs().amax(dim=1, keepdim=True) / E4M3_MAX
    label = f"t (6, 40) float32 with strides {lt.stride()}"
    expect_fp8_codes(codes, scale, t, want_scale, label, hint="read t through its own strides (or .contiguous())")
    given = torch.rand(6, 1) * 0.01 + 1e-3
    lt, lscale = distinct_layouts(t, given, order=("transposed", "fused_slice"))
    codes, scale = ex.quantize_fp8_rowwise(lt, lscale)
    label = f"t (6, 40) float32 with strides {lt.stride()}, given scale (6, 1) with strides {lscale.stride()}"
    expect_fp8_codes(codes, scale, t, given, label, hint="read t and the given scale through their own strides")


@checks("fp8_quantize")
def fp8_zero_row_and_tiny_values(ex):
    """an all-zero row gets scale 1 and zero codes; a row of 1e-30 values still uses its whole range"""
    t = torch.randn(3, 16)
    t[0] = 0.0
    t[2] = torch.rand(16) * 1e-30 + 1e-31
    codes, scale = ex.quantize_fp8_rowwise(t)
    want_scale = t.abs().amax(dim=1, keepdim=True) / E4M3_MAX
    want_scale[0] = 1.0
    expect_fp8_codes(
        codes, scale, t, want_scale, "t (3, 16), row 0 zeros, row 2 ~1e-30", hint="scale 1.0 for a zero row (no 0/0)"
    )


@checks("fp8_quantize")
def fp8_quantize_refuses_bad_input(ex):
    """1-D or 3-D t, integer or fp8 t, a scale of the wrong shape, zero, negative or infinite scale are refused"""
    t = torch.randn(4, 8)
    cases = [
        ("t 1-D", lambda: ex.quantize_fp8_rowwise(t[0])),
        ("t 3-D", lambda: ex.quantize_fp8_rowwise(t[None])),
        ("t int32", lambda: ex.quantize_fp8_rowwise(t.to(torch.int32))),
        ("t float8_e4m3fn", lambda: ex.quantize_fp8_rowwise(t.to(torch.float8_e4m3fn))),
        ("scale (4,)", lambda: ex.quantize_fp8_rowwise(t, torch.ones(4))),
        ("scale (1, 1) for 4 rows", lambda: ex.quantize_fp8_rowwise(t, torch.ones(1, 1))),
        ("scale with a zero", lambda: ex.quantize_fp8_rowwise(t, torch.tensor([[1.0], [0.0], [1.0], [1.0]]))),
        ("scale with a negative", lambda: ex.quantize_fp8_rowwise(t, -torch.ones(4, 1))),
        ("scale with inf", lambda: ex.quantize_fp8_rowwise(t, torch.full((4, 1), float("inf")))),
    ]
    for label, call in cases:
        expect_refused(call, input=label, hint="validate t's shape and dtype and the given scale first")


# ------------------------------------------------------------------------------------------------ fp8_matmul


FP8_CAPABILITY = (8, 9)  # FP8 tensor cores: Ada and Hopper


def fp8_supported() -> bool:
    """FP8 tl.dot compiles on compute capability 8.9+; the interpreter runs it anywhere."""
    if not triton_compiled():
        return True
    return torch.cuda.get_device_capability() >= FP8_CAPABILITY


def fp8_operands(M, N, K, device=None):
    """Random FP8 codes (spread over the E4M3 range) and positive float32 scales."""
    device = device or triton_device()
    a = (torch.randn(M, K) * 60).clamp(-448, 448).to(torch.float8_e4m3fn).to(device)
    b = (torch.randn(N, K) * 60).clamp(-448, 448).to(torch.float8_e4m3fn).to(device)
    sa = (torch.rand(M, 1) * 0.01 + 1e-4).to(device)
    sb = (torch.rand(N, 1) * 0.01 + 1e-4).to(device)
    return a, sa, b, sb


def fp8_oracle(a, sa, b, sb):
    """float64: (scale_a * a) @ (scale_b * b)^T, the codes read as exact float64 numbers."""
    return (a.double().cpu() * sa.double().cpu()) @ (b.double().cpu() * sb.double().cpu()).T


def fp8_baseline(a, sa, b, sb, out_dtype):
    """The same product in float32 on the codes, rounded to out_dtype: an fp32-accumulating FP8 GEMM's error."""
    return ((a.float() @ b.float().T) * sa.float() * sb.float().T).to(out_dtype)


FP8_ACCUMULATION_ERROR = 2.0**-10  # of sum |a b|: Hopper's FP8 tensor cores accumulate with about 14 bits


def expect_fp8_close(got, a, sa, b, sb, out_dtype, *, input, hint=""):
    """Compiled on a GPU: |got - oracle| <= 2^-10 * sum_k |scale_a a_k| |scale_b b_k| + out_dtype's rounding of the
    result. Hopper's FP8 tensor cores keep only about 14 bits while they accumulate (DeepSeek-V3 report, 3.3.2), so
    an FP8 GEMM on them is not an fp32-accumulating one; a wrong scale or stride is off by about |value|, which is
    sum |a b| / sqrt(K) for random operands (1/64 of it at K = 4096), far outside this bound. In the interpreter the
    products are summed in fp32: the package's policy against the fp32 product."""
    oracle = fp8_oracle(a, sa, b, sb)
    if not triton_compiled():
        expect_close(got, oracle, baseline=fp8_baseline(a, sa, b, sb, out_dtype), input=input, hint=hint)
        return
    expect_tensor(got, shape=tuple(oracle.shape), input=input)
    magnitude = (a.double().cpu() * sa.double().cpu()).abs() @ (b.double().cpu() * sb.double().cpu()).abs().T
    bound = FP8_ACCUMULATION_ERROR * magnitude + torch.finfo(out_dtype).eps * oracle.abs() + 1e-30
    value = got.double().cpu()
    bad = ~((value - oracle).abs() <= bound)  # NaN counts as off
    where = tuple(bad.nonzero()[0].tolist()) if bad.any() else None
    expect(
        where is None,
        f"{int(bad.sum())} of {oracle.numel()} elements off by more than FP8 tensor-core accumulation allows",
        input=input,
        expected=f"at {where}: {oracle[where].item():.6g} ± {bound[where].item():.2g}" if where else "",
        got=f"{value[where].item():.6g}" if where else "",
        hint=hint,
    )


@checks("fp8_matmul", gate=True)
def fp8_kernel_stays_inside_its_output(ex):
    """fp8_scaled_mm_kernel on windows: M=19 N=37 K=80 with 16 x 16 x 32 tiles (ragged on every axis)"""
    M, N, K = 19, 37, 80
    d = triton_device()
    a = (torch.randn(M + 3, K + 21) * 60).clamp(-448, 448).to(torch.float8_e4m3fn).to(d)[:M, :K]
    b = (torch.randn(N + 5, K + 19) * 60).clamp(-448, 448).to(torch.float8_e4m3fn).to(d)[:N, :K]
    sa = (torch.rand(M + 2, 2) * 0.01 + 1e-4).to(d)[:M, :1]
    sb = (torch.rand(N + 2, 3) * 0.01 + 1e-4).to(d)[:N, :1]
    buffer, window = guarded((N, M), (5, 7), device=d)
    c = window.T  # (M, N) column-major
    ex.fp8_scaled_mm_kernel[(-(-N // 16), -(-M // 16))](
        a, b, sa, sb, c, M, N, K,
        *a.stride(), *b.stride(), sa.stride(0), sb.stride(0), *c.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=32,
    )  # fmt: skip
    label = "a (19, 80), b (37, 80) FP8 windows, scales (19, 1), (37, 1) windows, c (19, 37) a column-major window of a NaN buffer"
    expect_guard_untouched(buffer, (N, M), input=label, hint="mask the store (rows < M, columns < N); use both strides")
    expect_close(
        c, fp8_oracle(a, sa, b, sb), input=label, hint="mask the K loads; multiply scale_a[row] * scale_b[col] once"
    )


@checks("fp8_matmul")
def fp8_shapes_and_out_dtypes(ex):
    """M, N, K off the tile (1x40x64, 5x33x96, 33x17x48), out float32 and float16 (bfloat16 compiled)"""
    for out_dtype in triton_dtypes():
        for M, N, K in ((1, 40, 64), (5, 33, 96), (33, 17, 48)):
            a, sa, b, sb = fp8_operands(M, N, K)
            label = f"a ({M}, {K}), b ({N}, {K}) float8_e4m3fn, out {out_dtype}"
            if not fp8_supported():
                expect_refused(lambda a=a, sa=sa, b=b, sb=sb, o=out_dtype: ex.fp8_scaled_mm(a, sa, b, sb, o),
                               input=label + " on cc < 8.9",
                               hint="refuse FP8 on a GPU without FP8 tensor cores", errors=(RuntimeError,))  # fmt: skip
                continue
            got = ex.fp8_scaled_mm(a, sa, b, sb, out_dtype)
            expect_tensor(got, shape=(M, N), dtype=out_dtype, device=a.device.type, input=label)
            expect_fp8_close(got, a, sa, b, sb, out_dtype, input=label,
                             hint="apply scale_a per row and scale_b per column after the K loop")  # fmt: skip


@checks("fp8_matmul", requires_capability=FP8_CAPABILITY)
def fp8_strided_operands_and_scales(ex):
    """a and b column-major (transposed views), scales as column windows of wider tensors: strides from .stride(i)"""
    M, N, K = 7, 20, 48
    d = triton_device()
    a = (torch.randn(K, M) * 60).clamp(-448, 448).to(torch.float8_e4m3fn).to(d).T
    b = (torch.randn(K, N) * 60).clamp(-448, 448).to(torch.float8_e4m3fn).to(d).T
    sa = (torch.rand(M, 2) * 0.01 + 1e-4).to(d)[:, :1]
    sb = (torch.rand(N, 3) * 0.01 + 1e-4).to(d)[:, 1:2]
    label = f"a{a.stride()}, b{b.stride()}, scale_a{sa.stride()}, scale_b{sb.stride()} (strides), out float32"
    got = ex.fp8_scaled_mm(a, sa, b, sb, torch.float32)
    expect_fp8_close(got, a, sa, b, sb, torch.float32, input=label,
                     hint="pass every stride: a.stride(0), a.stride(1), b.stride(0), b.stride(1), scale_a.stride(0), ...")  # fmt: skip


@checks("fp8_matmul", requires_capability=FP8_CAPABILITY)
def fp8_mm_operands_in_their_own_layouts(ex):
    """a, scale_a, b and scale_b each in a layout of its own (a fused slice, padded rows, transposed storage, a window
    of a bigger buffer), same values as contiguous copies"""
    M, N, K = 7, 20, 48
    a, sa, b, sb = fp8_operands(M, N, K)
    la, lsa, lb, lsb = distinct_layouts(a, sa, b, sb)
    expect_own_layouts(la, lsa, lb, lsb)
    label = (
        f"a ({M}, {K}), b ({N}, {K}) float8_e4m3fn with strides {la.stride()}, {lb.stride()}; scales with strides "
        f"{lsa.stride()}, {lsb.stride()}; out float32"
    )
    got = ex.fp8_scaled_mm(la, lsa, lb, lsb, torch.float32)
    expect_fp8_close(got, a, sa, b, sb, torch.float32, input=label, hint=HINT_OWN_STRIDES)


@checks("fp8_matmul", requires_capability=FP8_CAPABILITY)
def fp8_scales_differ_per_row_and_column(ex):
    """scale_a = [1, 2, 4, ...] per row and scale_b = [1, 10, 100] per column on all-ones codes: y = K * sa * sb"""
    M, N, K = 5, 3, 40
    d = triton_device()
    a = torch.ones(M, K).to(torch.float8_e4m3fn).to(d)
    b = torch.ones(N, K).to(torch.float8_e4m3fn).to(d)
    sa = (2.0 ** torch.arange(M, dtype=torch.float32))[:, None].to(d)
    sb = torch.tensor([[1.0], [10.0], [100.0]], device=d)
    want = 40.0 * sa.double().cpu() * sb.double().cpu().T
    expect_close(ex.fp8_scaled_mm(a, sa, b, sb, torch.float32), want, input="ones (5, 40) and (3, 40), sa 2**m, sb 10**n",
                 hint="c[m, n] = scale_a[m] * scale_b[n] * sum_k a[m, k] b[n, k]; not scale_a[n] or a scale per K step")  # fmt: skip


@checks("fp8_matmul", requires_capability=FP8_CAPABILITY)
def fp8_linear_close_to_float64(ex):
    """fp8_linear(x, w) (your quantiser + your GEMM) within E4M3's rounding of x @ w.T"""
    x = torch.randn(9, 96).to(triton_device())
    w = (torch.randn(20, 96) * 0.05).to(triton_device())
    got = ex.fp8_linear(x, w, torch.float32).double().cpu()
    exact = x.double().cpu() @ w.double().cpu().T
    err = ((got - exact).norm() / exact.norm()).item()
    expect(
        err < 0.1,
        "fp8_linear is further from x @ w.T than E4M3 rounding explains (3 mantissa bits: about 3-5% relative)",
        input="x (9, 96) ~ N(0, 1), w (20, 96) ~ N(0, 0.05^2)",
        expected="relative error < 0.1",
        got=f"{err:.4f}",
        hint="quantise both operands row-wise, multiply the codes, scale by sx[m] * sw[n]",
    )


@checks("fp8_matmul")
def fp8_matmul_refuses_bad_input(ex):
    """non-FP8 operands, mismatched K, scales of the wrong shape or dtype, an unsupported out_dtype are refused"""
    a, sa, b, sb = fp8_operands(4, 6, 32)
    cases = [
        ("a float16", lambda: ex.fp8_scaled_mm(a.to(torch.float16), sa, b, sb)),
        ("b float8_e5m2", lambda: ex.fp8_scaled_mm(a, sa, b.float().to(torch.float8_e5m2), sb)),
        ("K mismatch: a (4, 32), b (6, 16)", lambda: ex.fp8_scaled_mm(a, sa, b[:, :16], sb)),
        ("scale_a (4,)", lambda: ex.fp8_scaled_mm(a, sa[:, 0], b, sb)),
        ("scale_b (1, 6)", lambda: ex.fp8_scaled_mm(a, sa, b, sb.T)),
        ("scale_a float16", lambda: ex.fp8_scaled_mm(a, sa.half(), b, sb)),
        ("out_dtype int32", lambda: ex.fp8_scaled_mm(a, sa, b, sb, torch.int32)),
    ]
    for label, call in cases:
        expect_refused(call, input=label, hint="validate dtypes and shapes before launching")


@checks("fp8_matmul", requires_compiled=True)
def fp8_gpu_shapes(ex):
    """M = 16, 1000 and 4096-wide operands on a GPU: FP8 tensor cores (cc >= 8.9) or a clear refusal"""
    for M, N, K in ((16, 4096, 4096), (1000, 3000, 2048)):
        a, sa, b, sb = fp8_operands(M, N, K)
        label = f"a ({M}, {K}), b ({N}, {K}) float8_e4m3fn, out bfloat16"
        if not fp8_supported():
            expect_refused(lambda a=a, sa=sa, b=b, sb=sb: ex.fp8_scaled_mm(a, sa, b, sb), input=label,
                           hint="refuse FP8 on a GPU without FP8 tensor cores", errors=(RuntimeError,))  # fmt: skip
            continue
        got = ex.fp8_scaled_mm(a, sa, b, sb, torch.bfloat16)
        expect_fp8_close(got, a, sa, b, sb, torch.bfloat16, input=label)


# ------------------------------------------------------------------------------------------------ benchmark


def bench_problem(M: int, K: int, N: int, G: int, dtype=torch.float16):
    """Random GPU operands for one benchmark shape: x, int8 codes, packed int4 bytes, group and per-row scales, and
    the fp16 weight cuBLAS would multiply without quantisation."""
    return {
        "x": torch.randn(M, K, device="cuda", dtype=dtype),
        "codes": torch.randint(-127, 128, (N, K), dtype=torch.int8, device="cuda"),
        "packed": torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda"),
        "scales": torch.rand(N, K // G, device="cuda", dtype=dtype) * 0.01,
        "row_scales": torch.rand(N, device="cuda", dtype=dtype) * 0.01,
        "w16": torch.randn(N, K, device="cuda", dtype=dtype),
    }


def bench_shape(ex, M: int, K: int, N: int, G: int = 128) -> list:
    """One shape's rows: GB/s of the bytes each must read when M is small (decode), TFLOP/s when M is large."""
    p = bench_problem(M, K, N, G)
    x, codes, packed, scales, row_scales, w16 = (p[k] for k in ("x", "codes", "packed", "scales", "row_scales", "w16"))
    decode = M <= 16
    shape = f"M={M} K={K} N={N} fp16"
    io = 2 * M * (K + N)  # activations in, outputs out (fp16)
    runs = [
        (f"int8 G={G} (Triton)", lambda: ex.int8_weight_matmul(x, codes, scales, G), N * K + 2 * scales.numel()),
        (f"int4 G={G} (Triton)", lambda: ex.int4_weight_matmul(x, packed, scales, G), N * K // 2 + 2 * scales.numel()),
    ]
    if hasattr(torch, "_weight_int8pack_mm"):  # (M, K) x, (N, K) int8, (N,) scales; CUDA kernel since torch 2.4
        runs.append(("torch._weight_int8pack_mm (per channel)", lambda: torch._weight_int8pack_mm(x, codes, row_scales),
                     N * K + 2 * N))  # fmt: skip
    rows = []
    for name, fn, weight_bytes in runs:
        try:
            if decode:
                rows.append(bandwidth_row(name, shape, fn, weight_bytes + io))
            else:
                rows.append(flops_row(name, shape, fn, 2 * M * N * K))
        except RuntimeError as exc:  # a torch op not built for this GPU or dtype
            print(f"{name} at {shape} skipped: {str(exc).splitlines()[0]}")
    if not decode and torch.cuda.get_device_capability() >= (8, 9):  # FP8 tensor cores: both operands pre-quantised
        a8 = (x.float() / 8).clamp(-448, 448).to(torch.float8_e4m3fn)
        b8 = (w16.float() * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
        sa = torch.full((M, 1), 8.0, device="cuda")
        sb = torch.full((N, 1), 0.01, device="cuda")
        fp8_runs = [("fp8 e4m3 row-wise (Triton)", lambda: ex.fp8_scaled_mm(a8, sa, b8, sb, torch.bfloat16))]
        if hasattr(torch, "_scaled_mm"):  # (M, K) fp8 @ (K, N) fp8 column-major, scales (M, 1) and (1, N)
            fp8_runs.append(("torch._scaled_mm row-wise (cuBLASLt FP8)", lambda: torch._scaled_mm(
                a8, b8.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)))  # fmt: skip
        for name, fn in fp8_runs:
            try:
                rows.append(flops_row(name, shape.replace("fp16", "fp8"), fn, 2 * M * N * K))
            except RuntimeError as exc:
                print(f"{name} at {shape} skipped: {str(exc).splitlines()[0]}")
    measure = {"bytes_moved": 2 * N * K + io} if decode else {"flops": 2 * M * N * K}
    rows += baseline_rows("torch.matmul on the fp16 weight (cuBLAS)", shape, lambda a, b: a @ b.T, (x, w16), **measure)
    return rows


def benchmark(ex):
    """Decode (M = 1, 16) in GB/s of the bytes each kernel must read, next to the copy roofline, cuBLAS on the fp16
    weight and torch._weight_int8pack_mm; prefill (M = 4096) in TFLOP/s against cuBLAS fp16, with the FP8 GEMM and
    torch._scaled_mm on a GPU of compute capability 8.9+. (K, N) from
    Llama-3-8B: the attention output projection, the MLP up/gate and down projections."""
    shapes = ((4096, 4096), (4096, 14336), (14336, 4096))
    rows = [copy_row(14336 * 4096)]
    for M in (1, 16, 4096):
        for K, N in shapes:
            rows += bench_shape(ex, M, K, N)
    return rows
