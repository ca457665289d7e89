"""Checks for p03.moe_grouped_gemm. References: loop specifications of the permutation, the offsets and the tile
schedule written here (Python loops over pairs and experts), one float64 `torch.matmul` per expert for the grouped
GEMM, and the per-token MoE loop of the p02.moe_router checks (`llm_algo.references.moe.moe_loop_spec`, float64)
plus Hugging Face's `MixtralSparseMoeBlock` for the whole layer; guard elements around the kernel's output."""

import math

import torch

from llm_algo.bench import flops_row
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor, expect_value_error
from llm_algo.check.restrictions import MATMUL
from llm_algo.device import triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts
from llm_algo.references.moe import hf_mixtral_block, moe_loop_spec, random_experts, route_one_token

checks = Checks("p03.moe_grouped_gemm", triton=True)
GROUPED_MM = (torch._grouped_mm,) if hasattr(torch, "_grouped_mm") else ()
checks.restrict(
    "grouped_gemm",
    "moe_ffn",
    kernel=True,
    forbid=[*MATMUL, *GROUPED_MM],
    instead="multiply with tl.dot in your grouped_gemm_kernel (torch.matmul is the checks' reference)",
)


# ----------------------------------------------------------------------------------------------- expert_groups


def spec_groups(experts: torch.Tensor, num_experts: int):
    """The permutation by definition: for each expert in turn, the flat pairs t*k + j that chose it, in order."""
    flat = experts.reshape(-1).tolist()
    order, offsets = [], [0]
    for e in range(num_experts):
        order += [p for p, chosen in enumerate(flat) if chosen == e]
        offsets.append(len(order))
    return order, offsets


def spec_schedule(offsets: list[int], block_m: int):
    tile_expert, tile_row = [], []
    for e in range(len(offsets) - 1):
        for row in range(offsets[e], offsets[e + 1], block_m):
            tile_expert.append(e)
            tile_row.append(row)
    return tile_expert, tile_row


def random_routes(T: int, k: int, E: int, skew: float = 0.0) -> torch.Tensor:
    """(T, k) distinct expert ids per token, from a random router with optional per-expert bias (skew)."""
    scores = torch.rand(T, E) + skew * torch.arange(E, dtype=torch.float32) / max(E - 1, 1)
    return scores.topk(k, dim=-1).indices


def expect_groups(ex, experts, num_experts, label):
    order, offsets = ex.sort_by_expert(experts, num_experts)
    want_order, want_offsets = spec_groups(experts, num_experts)
    expect_tensor(order, shape=(experts.numel(),), dtype=torch.int64, input=label, what="order")
    expect_tensor(offsets, shape=(num_experts + 1,), dtype=torch.int64, input=label, what="group_offsets")
    expect(
        offsets.tolist() == want_offsets,
        "wrong group offsets",
        input=label,
        expected=want_offsets,
        got=offsets.tolist(),
        hint="offsets = [0, cumsum(bincount(flat, minlength=E))]: E + 1 entries, trailing empty experts included",
    )
    expect(
        order.tolist() == want_order,
        "wrong permutation",
        input=label,
        expected=want_order[:24],
        got=order.tolist()[:24],
        hint="argsort the flat (token-major: t*k + j) expert ids with stable=True",
    )


@checks("expert_groups")
def hand_checkable_permutation(ex):
    """experts [[2, 0], [1, 2], [0, 3], [2, 1]] over 4 experts: order [1, 4, 2, 7, 0, 3, 6, 5], offsets [0, 2, 4, 7, 8]"""
    experts = torch.tensor([[2, 0], [1, 2], [0, 3], [2, 1]])
    expect_groups(ex, experts, 4, "experts [[2, 0], [1, 2], [0, 3], [2, 1]], E = 4")


@checks("expert_groups")
def random_routes_with_empty_experts(ex):
    """random routes (k = 1, 2, 4) with skewed routers so that some experts, the last ones too, receive nothing"""
    torch.manual_seed(0)
    for T, k, E, skew in ((13, 2, 8, 0.0), (40, 4, 16, 0.0), (9, 1, 12, 0.0), (30, 2, 10, 3.0), (1, 1, 5, 0.0)):
        experts = random_routes(T, k, E, skew)
        if skew:
            experts = experts.clamp(max=E - 3)  # the last two experts stay empty
        expect_groups(
            ex, experts, E, f"T={T}, k={k}, E={E}, loads {torch.bincount(experts.flatten(), minlength=E).tolist()}"
        )
    expect_groups(ex, torch.zeros(0, 2, dtype=torch.int64), 4, "T = 0 tokens, k = 2, E = 4")


@checks("expert_groups")
def sort_refuses_bad_expert_ids(ex):
    """an id >= E, a negative id and a 1-D experts tensor raise ValueError; the message names the bad id"""
    for label, experts, E, bad in (
        ("experts [[0, 4]] with E = 4", torch.tensor([[0, 4]]), 4, "4"),
        ("experts [[1, 6], [2, 0]] with E = 4", torch.tensor([[1, 6], [2, 0]]), 4, "6"),
        ("experts [[-1, 2]] with E = 4", torch.tensor([[-1, 2]]), 4, "-1"),
        ("experts (6,) 1-D", torch.tensor([0, 1, 2, 3, 0, 1]), 4, None),
    ):
        hint = "check 0 <= id < num_experts before sorting"
        expect_value_error(lambda e=experts, n=E: ex.sort_by_expert(e, n), input=label, hint=hint)
        if bad is None:
            continue
        try:
            ex.sort_by_expert(experts, E)
        except ValueError as exc:
            message = str(exc).replace(f"[0, {E})", "")
            expect(
                bad in message,
                "the error message does not name the bad expert id",
                input=label,
                expected=f"a message that contains {bad}",
                got=str(exc)[:160],
                hint="name the offending id: the smallest when it is negative, else the largest",
            )


def expect_schedule(ex, offsets: list[int], block_m: int):
    tile_expert, tile_row = ex.tile_schedule(torch.tensor(offsets), block_m)
    want_expert, want_row = spec_schedule(offsets, block_m)
    label = f"group_offsets {offsets}, block_m={block_m}"
    expect_tensor(tile_expert, shape=(len(want_expert),), dtype=torch.int32, input=label, what="tile_expert")
    expect_tensor(tile_row, shape=(len(want_row),), dtype=torch.int32, input=label, what="tile_row")
    expect(
        tile_expert.tolist() == want_expert and tile_row.tolist() == want_row,
        "wrong tile schedule",
        input=label,
        expected=f"tile_expert {want_expert[:16]}, tile_row {want_row[:16]}",
        got=f"tile_expert {tile_expert.tolist()[:16]}, tile_row {tile_row.tolist()[:16]}",
        hint="cdiv(rows, block_m) tiles per expert (0 for an empty group), first row = group start + block_m * i",
    )


@checks("expert_groups")
def hand_checkable_schedule(ex):
    """offsets [0, 3, 3, 20, 21], block_m 16: tile_expert [0, 2, 2, 3], tile_row [0, 3, 19, 20]"""
    expect_schedule(ex, [0, 3, 3, 20, 21], 16)


@checks("expert_groups")
def schedule_of_ragged_and_empty_groups(ex):
    """groups that are empty, exact multiples of block_m, one row, all rows in one expert; block_m 1, 16, 64"""
    for offsets, block_m in (
        ([0, 0, 0, 5], 16),
        ([0, 32, 32, 48, 49], 16),
        ([0, 100], 64),
        ([0, 0, 0], 16),
        ([0, 1, 2, 3], 1),
        ([0, 7, 70, 70, 135, 200], 64),
    ):
        expect_schedule(ex, offsets, block_m)


@checks("expert_groups")
def schedule_refuses_bad_offsets(ex):
    """offsets that decrease or do not start at 0, and block_m = 0, raise ValueError"""
    for label, offsets, block_m in (
        ("offsets [0, 5, 3, 8]", [0, 5, 3, 8], 16),
        ("offsets [2, 5, 8]", [2, 5, 8], 16),
        ("offsets [0, 4, 8], block_m = 0", [0, 4, 8], 0),
    ):
        expect_value_error(lambda o=offsets, b=block_m: ex.tile_schedule(torch.tensor(o), b), input=label,
                           hint="offsets start at 0 and never decrease; block_m >= 1")  # fmt: skip


# ------------------------------------------------------------------------------------------------ grouped_gemm


def groups_from_sizes(sizes: list[int]) -> torch.Tensor:
    return torch.tensor([0, *itertools_accumulate(sizes)], dtype=torch.int64)


def itertools_accumulate(sizes):
    total, out = 0, []
    for s in sizes:
        total += s
        out.append(total)
    return out


def oracle_grouped(x, w, offsets) -> torch.Tensor:
    """One float64 matmul per expert, on CPU."""
    x64, w64 = x.double().cpu(), w.double().cpu()
    y = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float64)
    for e in range(w.shape[0]):
        lo, hi = int(offsets[e]), int(offsets[e + 1])
        y[lo:hi] = x64[lo:hi] @ w64[e].T
    return y


def baseline_grouped(x, w, offsets) -> torch.Tensor:
    """The same loop in x's dtype: the error a plain PyTorch implementation makes."""
    y = torch.empty(x.shape[0], w.shape[1], dtype=x.dtype, device=x.device)
    for e in range(w.shape[0]):
        lo, hi = int(offsets[e]), int(offsets[e + 1])
        y[lo:hi] = x[lo:hi] @ w[e].T
    return y


def expect_grouped(ex, x, w, sizes, label, hint):
    offsets = groups_from_sizes(sizes).to(x.device)
    got = ex.grouped_gemm(x, w, offsets)
    label = f"{label}, group sizes {sizes}"
    expect_tensor(got, shape=(x.shape[0], w.shape[1]), dtype=x.dtype, device=x.device.type, input=label)
    expect_close(got, oracle_grouped(x, w, offsets), baseline=baseline_grouped(x, w, offsets), input=label, hint=hint)


HINT_GROUP_END = "mask rows with offs_m < group_offsets[expert + 1] (the end of this group, not M)"


@checks("grouped_gemm", gate=True)
def kernel_stays_inside_its_group(ex):
    """grouped_gemm_kernel on windows of larger buffers, groups [5, 0, 19, 1, 16] (16-row tiles), N=29, K=40:
    guards untouched, every group right"""
    sizes, N, K = [5, 0, 19, 1, 16], 29, 40
    offsets = groups_from_sizes(sizes)
    M, E = offsets[-1].item(), len(sizes)
    dev = triton_device()
    x = random_window((M, K), (3, 24), device=dev)
    w = random_window((E, N, K), (1, 5, 24), device=dev)
    buffer, y = guarded((M, N), (7, 9), device=dev)
    tile_expert, tile_row = (
        torch.tensor(t, dtype=torch.int32, device=dev) for t in spec_schedule(offsets.tolist(), 16)
    )
    ex.grouped_gemm_kernel[(len(tile_expert) * -(-N // 16),)](
        x, w, y, offsets.to(dev), tile_expert, tile_row, len(tile_expert), N, K,
        *x.stride(), *w.stride(), *y.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=2, INPUT_PRECISION="ieee",
    )  # fmt: skip
    label = (
        f"x (41, 40) window, w (5, 29, 40) window, y (41, 29) window of a NaN buffer, groups {sizes}, 16x16x32 tiles"
    )
    expect_guard_untouched(buffer, (M, N), input=label, hint="mask the store with the group's rows and cols < N")
    expect_close(y, oracle_grouped(x, w, offsets), input=label, hint=HINT_GROUP_END + "; mask K with other=0.0")


@checks("grouped_gemm")
def kernel_writes_a_column_major_output(ex):
    """grouped_gemm_kernel with y a transposed window (strides (1, 44)) and int32 group offsets: y's strides used"""
    sizes, N, K = [7, 0, 18], 29, 40
    offsets = groups_from_sizes(sizes)
    M, E = offsets[-1].item(), len(sizes)
    dev = triton_device()
    x = torch.randn(M, K, device=dev)
    w = torch.randn(E, N, K, device=dev)
    buffer, window = guarded((N, M), (5, 19), device=dev)
    y = window.T  # (25, 29), column-major
    tile_expert, tile_row = (
        torch.tensor(t, dtype=torch.int32, device=dev) for t in spec_schedule(offsets.tolist(), 16)
    )
    ex.grouped_gemm_kernel[(len(tile_expert) * -(-N // 16),)](
        x, w, y, offsets.to(dev, torch.int32), tile_expert, tile_row, len(tile_expert), N, K,
        *x.stride(), *w.stride(), *y.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=2, INPUT_PRECISION="ieee",
    )  # fmt: skip
    label = f"y (25, 29) a transposed window with strides {y.stride()}, groups {sizes}, int32 offsets"
    expect_guard_untouched(buffer, (N, M), input=label, hint="address y with both of its strides")
    expect_close(y, oracle_grouped(x, w, offsets), input=label,
                 hint="y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn")  # fmt: skip


@checks("grouped_gemm")
def block_m_rule(ex):
    """pick_block_m: 16 interpreted; compiled 64 below 128 rows per expert on average, 128 from there"""
    for M, E, compiled, want in (
        (8192, 8, True, 128),
        (32768, 128, True, 128),
        (32767, 256, True, 64),
        (1023, 8, True, 64),
        (1024, 8, True, 128),
        (64, 1, True, 64),
        (8192, 8, False, 16),
    ):
        got = ex.pick_block_m(M, E, compiled)
        expect(got == want, "wrong BLOCK_M", input=f"M={M}, E={E}, compiled={compiled}", expected=want, got=got,
               hint="16 when interpreted; else 64 if M < 128 * E, else 128")  # fmt: skip


@checks("grouped_gemm")
def hand_checkable_two_experts(ex):
    """x = [[1, 2], [3, 4], [5, 6]], expert 0 takes row 0 with w0 = I, expert 1 rows 1-2 with w1 = [[0, 1], [1, 1]]"""
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], device=triton_device())
    w = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 1.0]]], device=triton_device())
    expect_close(
        ex.grouped_gemm(x, w, torch.tensor([0, 1, 3], device=triton_device())),
        torch.tensor([[1.0, 2.0], [4.0, 7.0], [6.0, 11.0]], dtype=torch.float64),
        input="x [[1, 2], [3, 4], [5, 6]], w0 = I, w1 = [[0, 1], [1, 1]], group_offsets [0, 1, 3]",
        hint="y[i] = x[i] @ w[e(i)].T: row 0 with w0, rows 1 and 2 with w1",
    )


@checks("grouped_gemm")
def ragged_and_empty_groups(ex):
    """group sizes that are empty, 1, not multiples of the tile, and all rows in one expert; N = 1; fp32 and fp16"""
    torch.manual_seed(1)
    cases = [
        ([5, 0, 19, 1, 16], 29, 40),
        ([0, 0, 33], 16, 16),
        ([1], 7, 5),
        ([4, 0, 3], 1, 5),
        ([17, 0], 40, 70),
        ([3, 3, 3, 3, 3, 3], 33, 18),
    ]
    for dtype in triton_dtypes():
        for sizes, N, K in cases:
            x = torch.randn(sum(sizes), K, device=triton_device()).to(dtype)
            w = torch.randn(len(sizes), N, K, device=triton_device()).to(dtype)
            expect_grouped(ex, x, w, sizes, describe(x=x, w=w), HINT_GROUP_END + "; cdiv tiles per expert")


@checks("grouped_gemm")
def many_experts_and_strided_weights(ex):
    """12 experts with random loads; w as a transposed view (E, K, N).transpose(1, 2) and x a column slice"""
    torch.manual_seed(2)
    sizes = torch.bincount(random_routes(20, 2, 12).flatten(), minlength=12).tolist()
    M, N, K = sum(sizes), 24, 36
    dev = triton_device()
    w_t = torch.randn(12, K, N, device=dev).transpose(1, 2)  # (12, N, K), stride_wk = N
    x_s = torch.randn(M, 2 * K, device=dev)[:, ::2]  # stride_xk = 2
    expect_grouped(ex, x_s, w_t, sizes, f"x (M, {K}) strides {x_s.stride()}, w (12, {N}, {K}) strides {w_t.stride()}",
                   "address x and w with every stride: x_ptr + m * stride_xm + k * stride_xk, w with stride_we/wn/wk")  # fmt: skip


@checks("grouped_gemm")
def operands_in_their_own_layouts(ex):
    """x, w and the group offsets each in a layout of its own (x a fused slice, w padded rows, the offsets every other
    element of a buffer; then x transposed, w a window of a bigger buffer), same values as contiguous copies"""
    sizes, N, K = [5, 0, 19, 1, 16], 29, 40
    dev = triton_device()
    offsets = groups_from_sizes(sizes).to(dev)
    for dtype in triton_dtypes():
        for order in (None, ("transposed", "outer_padded", "fused_slice")):
            x = torch.randn(sum(sizes), K, device=dev).to(dtype)
            w = torch.randn(len(sizes), N, K, device=dev).to(dtype)
            lx, lw, lo = distinct_layouts(x, w, offsets, order=order)
            expect_own_layouts(lx, lw, lo)
            label = f"{describe(x=x, w=w)}, strides x {lx.stride()}, w {lw.stride()}, group_offsets {lo.stride()}"
            got = ex.grouped_gemm(lx, lw, lo)
            label += f", group sizes {sizes}"
            expect_tensor(got, shape=(x.shape[0], N), dtype=dtype, device=dev, input=label)
            expect_close(
                got,
                oracle_grouped(x, w, offsets),
                baseline=baseline_grouped(x, w, offsets),
                input=label,
                hint="every operand through its own strides; the kernel reads the offsets with unit stride: "
                "pass them contiguous",
            )


@checks("grouped_gemm", requires_compiled=True)
def at_scale_on_the_gpu(ex):
    """64 experts, 4096 x 8 routed rows, N = 768, K = 2048 in fp16 and bf16; Mixtral-sized groups in bf16"""
    torch.manual_seed(3)
    for dtype in triton_dtypes():
        for T, k, E, N, K in ((4096, 8, 64, 768, 2048), (1024, 2, 8, 1024, 4096)):
            sizes = torch.bincount(random_routes(T, k, E, 1.0).flatten(), minlength=E).tolist()
            x = torch.randn(T * k, K, device="cuda", dtype=dtype)
            w = torch.randn(E, N, K, device="cuda", dtype=dtype) / K**0.5
            expect_grouped(ex, x, w, sizes, describe(x=x, w=w), HINT_GROUP_END)


@checks("grouped_gemm")
def grouped_gemm_refuses_bad_input(ex):
    """offsets of the wrong length or not ending at M, K mismatch, mixed dtypes, a 2-D w, int inputs"""
    dev = triton_device()
    x, w = torch.randn(6, 8, device=dev), torch.randn(3, 5, 8, device=dev)
    good = torch.tensor([0, 2, 2, 6], device=dev)
    for label, args in (
        ("group_offsets (3,) for E = 3", (x, w, torch.tensor([0, 2, 6], device=dev))),
        ("group_offsets ending at 5, M = 6", (x, w, torch.tensor([0, 2, 2, 5], device=dev))),
        ("group_offsets decreasing [0, 4, 2, 6]", (x, w, torch.tensor([0, 4, 2, 6], device=dev))),
        ("x (6, 8), w (3, 5, 7)", (x, torch.randn(3, 5, 7, device=dev), good)),
        ("x float32, w float16", (x, w.half(), good)),
        ("w (5, 8) 2-D", (x, torch.randn(5, 8, device=dev), good)),
        ("x, w int32", (x.int(), w.int(), good)),
    ):
        expect_refused(lambda a=args: ex.grouped_gemm(*a), input=label, hint="validate shapes, dtypes and offsets")


# ------------------------------------------------------------------------------------------------ moe_ffn


def mixtral_routes(x, weights, top_k):
    """gates and experts of Mixtral's router (softmax, top-k, renormalise), one token at a time (float64)."""
    logits = x.double().cpu() @ weights["router_weight"].double().T
    gates, experts = [], []
    for t in range(x.shape[0]):
        g, e = route_one_token(logits[t], top_k, "softmax", True)
        gates.append(torch.stack(g))
        experts.append(e)
    return torch.stack(gates) if gates else torch.zeros(0, top_k, dtype=torch.float64), torch.tensor(experts).reshape(
        -1, top_k
    )


def baseline_moe(x, gates, experts, w_gate, w_up, w_down):
    """The layer in x's dtype, one expert at a time with torch ops: the error a plain implementation makes."""
    out = torch.zeros(x.shape, dtype=torch.float32)
    for e in range(w_gate.shape[0]):
        token, choice = (experts == e).nonzero(as_tuple=True)
        if token.numel():
            rows = x[token]
            y = (torch.nn.functional.silu(rows @ w_gate[e].T) * (rows @ w_up[e].T)) @ w_down[e].T
            out.index_add_(0, token, y.float() * gates[token, choice, None].float())
    return out.to(x.dtype)


def expect_moe(ex, T, H, F, E, k, dtype, label_extra="", hf=False, layouts=False):
    weights = random_experts(E, H, F)  # float64
    x = torch.randn(T, H, dtype=torch.float64).to(dtype)
    x64 = x.double()  # the input as the learner sees it, exactly
    gates, experts = mixtral_routes(x64, weights, k)
    w = {n: weights[n].to(dtype) for n in ("w_gate", "w_up", "w_down")}
    dev = triton_device()
    gates = gates.to(dtype)  # in x's dtype, as a router that does not upcast returns them
    operands = (x.to(dev), gates.to(dev), experts.to(dev), *(v.to(dev) for v in w.values()))
    if layouts:  # every operand in a layout of its own, same values
        operands = distinct_layouts(*operands)
        expect_own_layouts(*operands)
        label_extra += ", strides " + ", ".join(str(t.stride()) for t in operands)
    got = ex.moe_ffn(*operands)
    label = f"{describe(x=x)}, E={E}, k={k}, F={F}{label_extra}"
    expect_tensor(got, shape=(T, H), dtype=dtype, device=dev, input=label)
    spec_weights = {"router_weight": weights["router_weight"], **{n: v.double() for n, v in w.items()}}
    oracle = moe_loop_spec(x64, spec_weights, k)
    baseline = baseline_moe(x, gates, experts, *w.values())
    hint = (
        "sorted row i belongs to token order[i] // k; scale by gates.reshape(-1)[order]; index_add (k rows per token)"
    )
    expect_close(got, oracle, baseline=baseline, input=label + ", vs the per-token loop in float64", hint=hint)
    if hf:
        with torch.no_grad():
            out = hf_mixtral_block(spec_weights, k)(x64[None])
        hugging_face = (out[0] if isinstance(out, tuple) else out)[0]
        expect_close(got, hugging_face, baseline=baseline, input=label + ", vs MixtralSparseMoeBlock", hint=hint)


@checks("moe_ffn")
def matches_the_per_token_loop(ex):
    """T=20, H=24, F=40, 6 experts, k = 2 and 1 in fp32 (and fp16), against the p02 per-token loop in float64"""
    torch.manual_seed(4)
    expect_moe(ex, 20, 24, 40, 6, 2, torch.float32)
    expect_moe(ex, 11, 16, 18, 5, 1, torch.float32)
    for dtype in triton_dtypes()[1:]:
        expect_moe(ex, 17, 32, 24, 4, 2, dtype)


@checks("moe_ffn")
def matches_mixtral_sparse_moe_block(ex):
    """the same layer as Hugging Face's MixtralSparseMoeBlock (dropless) with the same weights, k = 2 of 8 experts"""
    torch.manual_seed(5)
    expect_moe(ex, 14, 16, 32, 8, 2, torch.float32, hf=True)


@checks("moe_ffn")
def layer_operands_in_their_own_layouts(ex):
    """x, gates, experts, w_gate, w_up and w_down each in a layout of its own (fused slice, padded rows, transposed
    storage, a window of a bigger buffer, ...), same values as contiguous copies"""
    torch.manual_seed(7)
    expect_moe(ex, 13, 16, 24, 5, 2, torch.float32, layouts=True)


@checks("moe_ffn")
def empty_experts_one_token_and_k_equal_e(ex):
    """one token (most experts empty), k = E (every token everywhere), more experts than routed rows"""
    torch.manual_seed(6)
    expect_moe(ex, 1, 16, 20, 6, 2, torch.float32, ", a single token")
    expect_moe(ex, 5, 16, 20, 3, 3, torch.float32, ", k = E")
    expect_moe(ex, 3, 16, 16, 16, 2, torch.float32, ", 16 experts, 6 routed rows")


@checks("moe_ffn")
def moe_ffn_refuses_bad_input(ex):
    """gates and experts of different shapes, an expert id >= E: ValueError"""
    dev = triton_device()
    weights = random_experts(4, 16, 16, dtype=torch.float32)
    w = [weights[n].to(dev) for n in ("w_gate", "w_up", "w_down")]
    x = torch.randn(3, 16, device=dev)
    gates = torch.full((3, 2), 0.5, device=dev)
    for label, g, e in (
        ("gates (3, 2), experts (3, 1)", gates, torch.zeros(3, 1, dtype=torch.int64, device=dev)),
        ("experts holding id 4 with E = 4", gates, torch.tensor([[0, 1], [2, 4], [3, 0]], device=dev)),
    ):
        expect_value_error(lambda g=g, e=e: ex.moe_ffn(x, g, e, *w), input=label,
                           hint="validate the routing before sorting")  # fmt: skip


# ------------------------------------------------------------------------------------------------ benchmark


def benchmark(ex):
    """Gate projection of Mixtral-8x7B and Qwen3-30B-A3B MoE layers in bf16, 4096 tokens from a random router:
    the grouped kernel, a dense GEMM of the same total size (cuBLAS), torch._grouped_mm, a loop of matmuls."""
    rows = []
    for name, T, k, E, N, K in (("Mixtral-8x7B", 4096, 2, 8, 14336, 4096), ("Qwen3-30B-A3B", 4096, 8, 128, 768, 2048)):
        rows += benchmark_case(ex, name, T, k, E, N, K)
    return rows


def benchmark_case(ex, name, T, k, E, N, K):
    torch.manual_seed(0)
    sizes = torch.bincount(random_routes(T, k, E).flatten(), minlength=E)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)]).cuda()
    M = T * k
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / math.sqrt(K)
    flops = 2 * M * N * K
    shape = f"{name}: M={M} E={E} N={N} K={K} bf16"
    rows = [flops_row("grouped_gemm (Triton)", shape, lambda: ex.grouped_gemm(x, w, offsets), flops)]
    dense_w = w[0].T  # (K, N) view of one expert's (N, K) weights: the F.linear layout, as the grouped kernel reads it
    rows.append(flops_row("dense GEMM of the same size (torch.matmul, cuBLAS)", shape, lambda: x @ dense_w, flops))
    if hasattr(torch, "_grouped_mm"):
        ends = offsets[1:].to(torch.int32)
        w_t = w.transpose(1, 2)  # (E, K, N), K-contiguous per expert
        try:
            torch._grouped_mm(x, w_t, offs=ends)
            rows.append(flops_row("torch._grouped_mm", shape, lambda: torch._grouped_mm(x, w_t, offs=ends), flops))
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            print(f"torch._grouped_mm not timed at {shape}: {type(exc).__name__}: {str(exc)[:100]}")
    bounds = offsets.tolist()
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

    def loop():
        for e in range(E):
            torch.matmul(x[bounds[e] : bounds[e + 1]], w[e].T, out=y[bounds[e] : bounds[e + 1]])
        return y

    rows.append(flops_row("loop of torch.matmul, one per expert", shape, loop, flops))
    return rows
