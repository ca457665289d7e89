"""Checks for p03.multi_lora. References: a loop specification of the segments written here, a per-token loop of
float64 products for the shrink, the expand and the whole LoRA path, Hugging Face PEFT 0.21's mixed-adapter batch
(`lora.Linear.forward(x, adapter_names=[...])`, one adapter per token, `"__base__"` for none) on a one-layer module
holding the same weights, and guard elements around the kernels' outputs."""

import math
import warnings

import torch
import torch.nn as nn

from llm_algo.bench import bandwidth_row, copy_row
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
from llm_algo.check.restrictions import MATMUL
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts, fused_slice

checks = Checks("p03.multi_lora", triton=True)
checks.in_place("lora_expand", "y")  # y += the adapters' contribution, in place (punica's contract)
checks.restrict(
    "lora_shrink",
    "lora_expand",
    kernel=True,
    forbid=[*MATMUL, "peft"],
    instead="multiply with tl.dot in your shrink and expand kernels (torch.matmul and PEFT are the checks' references)",
)


# ------------------------------------------------------------------------------------------------ segments


def spec_segments(ids: list[int], num_adapters: int):
    """By definition: the -1 tokens first, then for each adapter in turn the tokens that use it, in token order."""
    order = [t for t, a in enumerate(ids) if a == -1]
    offsets, adapters = [len(order)], []
    for a in range(num_adapters):
        users = [t for t, b in enumerate(ids) if b == a]
        if users:
            order += users
            adapters.append(a)
            offsets.append(len(order))
    return order, offsets, adapters


def random_ids(T: int, L: int, none_fraction: float = 0.3, used: int | None = None) -> torch.Tensor:
    """(T,) adapter ids, about none_fraction of them -1, drawn from `used` adapters (default all L), shuffled."""
    pool = torch.randperm(L)[: used or L]
    ids = pool[torch.randint(0, pool.numel(), (T,))]
    ids[torch.rand(T) < none_fraction] = -1
    return ids


def expect_segments(ex, ids: torch.Tensor, L: int, label: str):
    order, offsets, adapters = ex.lora_segments(ids, L)
    want = spec_segments(ids.tolist(), L)
    for name, got, expected in zip(
        ("order", "seg_offsets", "seg_adapter"), (order, offsets, adapters), want, strict=True
    ):
        expect_tensor(got, shape=(len(expected),), dtype=torch.int64, input=label, what=name)
        expect(
            got.tolist() == expected,
            f"wrong {name}",
            input=label,
            expected=expected[:24],
            got=got.tolist()[:24],
            hint="stable argsort of the ids; the -1 tokens come first and are in no segment; one segment per used "
            "adapter, increasing id; seg_offsets starts at the number of -1 tokens",
        )


@checks("lora_segments")
def hand_checkable_segments(ex):
    """ids [2, -1, 0, 2, 2, -1, 0], L = 3: order [1, 5, 2, 6, 0, 3, 4], offsets [2, 4, 7], adapters [0, 2]"""
    expect_segments(ex, torch.tensor([2, -1, 0, 2, 2, -1, 0]), 3, "adapter_ids [2, -1, 0, 2, 2, -1, 0], L = 3")


@checks("lora_segments")
def random_batches_with_unused_adapters(ex):
    """random ids over 4..16 adapters, some unused (the last one too), with and without -1 tokens; one token;
    no adapter at all; no tokens"""
    torch.manual_seed(0)
    for T, L, none, used in ((20, 8, 0.3, 5), (33, 16, 0.0, 16), (1, 4, 0.0, 1), (12, 4, 1.0, 4), (50, 6, 0.5, 2)):
        ids = random_ids(T, L, none, used)
        expect_segments(ex, ids, L, f"T={T}, L={L}, adapter_ids {ids.tolist()}")
    expect_segments(ex, torch.tensor([3, 3, 3]), 4, "adapter_ids [3, 3, 3], L = 4 (only the last adapter)")
    ids = random_ids(15, 5, 0.3)
    expect_segments(ex, ids.int(), 5, f"int32 adapter_ids {ids.tolist()}, L = 5 (results are int64 all the same)")
    expect_segments(ex, torch.zeros(0, dtype=torch.int64), 4, "no tokens, L = 4")


@checks("lora_segments")
def segments_refuse_bad_ids(ex):
    """an id >= L, an id of -2 and a 2-D ids tensor raise ValueError; the message names the bad id"""
    for label, ids, bad in (
        ("adapter_ids [0, 4] with L = 4", torch.tensor([0, 4]), "4"),
        ("adapter_ids [-1, 7, 2] with L = 4", torch.tensor([-1, 7, 2]), "7"),
        ("adapter_ids [-2, 1] with L = 4", torch.tensor([-2, 1]), "-2"),
        ("adapter_ids [-3, -1, 0] with L = 4", torch.tensor([-3, -1, 0]), "-3"),
        ("adapter_ids (2, 2)", torch.tensor([[0, 1], [1, 0]]), None),
    ):
        expect_value_error(lambda i=ids: ex.lora_segments(i, 4), input=label, hint="ids must lie in [-1, L)")
        if bad is None:
            continue
        try:
            ex.lora_segments(ids, 4)
        except ValueError as exc:
            message = str(exc).replace("[-1, 4)", "")
            expect(
                bad in message,
                "the error message does not name the bad adapter id",
                input=label,
                expected=f"a message that contains {bad}",
                got=str(exc)[:160],
                hint="name the offending id: the smallest when it is below -1, else the largest",
            )


# ------------------------------------------------------------------------------------------------ shared helpers


def case(T, K, N, L, R, dtype, none_fraction=0.3, used=None, seed=0):
    """x (T, K), A (L, R, K), B (L, N, R) in dtype on the Triton device, scales (L,) float32, ids (T,)."""
    torch.manual_seed(seed)
    dev = triton_device()
    x = torch.randn(T, K).to(dtype).to(dev)
    A = (torch.randn(L, R, K) / math.sqrt(K)).to(dtype).to(dev)
    B = torch.randn(L, N, R).to(dtype).to(dev)
    scales = (torch.rand(L) * 2 + 0.5).to(dev)  # alpha / r of each adapter
    ids = random_ids(T, L, none_fraction, used).to(dev)
    return x, A, B, scales, ids


def spec_device_segments(ids, L):
    order, offsets, adapters = spec_segments(ids.tolist(), L)
    dev = ids.device
    return (torch.tensor(order, dtype=torch.int64, device=dev), torch.tensor(offsets, dtype=torch.int64, device=dev),
            torch.tensor(adapters, dtype=torch.int64, device=dev))  # fmt: skip


def loop_shrink(x, A, scales, ids, dtype=torch.float64):
    """v[t] = scales[a] * x[t] @ A[a].T one token at a time in `dtype` (float32 out for a non-float64 dtype)."""
    v = torch.zeros(x.shape[0], A.shape[1], dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    x_c, A_c, s_c = x.cpu().to(dtype), A.cpu().to(dtype), scales.cpu().tolist()  # one copy each, not one per token
    for t, a in enumerate(ids.tolist()):
        if a >= 0:
            v[t] = (s_c[a] * (x_c[t] @ A_c[a].T)).to(v.dtype)
    return v


def loop_expand(y, v, B, ids, dtype=torch.float64):
    """y[t] + v[t] @ B[a].T one token at a time; float64 oracle, or the dtype's baseline (v cast to B's dtype)."""
    out = y.cpu().to(torch.float64 if dtype == torch.float64 else torch.float32).clone()
    work = dtype if dtype == torch.float64 else B.dtype
    v_c, B_c = v.cpu().to(work), B.cpu().to(work)
    for t, a in enumerate(ids.tolist()):
        if a >= 0:
            out[t] += (v_c[t] @ B_c[a].T).to(out.dtype)
    return out if dtype == torch.float64 else out.to(y.dtype)


def own_layouts(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every operand in a layout of its own, same values: distinct_layouts for the 2-D and 3-D ones, and each 1-D one
    (scales, ids, segment tensors) a column of a wider tensor with its own stride (3, 4, 5, ...)."""
    views = iter(distinct_layouts(*(t for t in tensors if t.dim() > 1)))
    parts = iter(range(3, 3 + len(tensors)))
    out = tuple(next(views) if t.dim() > 1 else fused_slice(t, parts=next(parts)) for t in tensors)
    expect_own_layouts(*out)
    return out


def strides_label(**tensors) -> str:
    return "strides " + ", ".join(f"{name} {t.stride()}" for name, t in tensors.items())


HINT_OWN = (
    "every operand through its own strides; the kernel reads scales, order, seg_offsets and seg_adapter with unit "
    "stride: make them contiguous"
)


HINT_TOKENS = "rows are positions in order: address x, v and y at the token ids tok = order[rows]"


# ------------------------------------------------------------------------------------------------ lora_shrink


@checks("lora_shrink", gate=True)
def shrink_writes_only_adapted_tokens(ex):
    """the kernel on windows of larger buffers, T=37 K=70 R=5 (BLOCK_R 16): v of the -1 tokens and the guards untouched"""
    x, A, _, scales, ids = case(37, 70, 8, 6, 5, torch.float32, none_fraction=0.3, used=4)
    dev = triton_device()
    x = random_window((37, 70), (3, 22), device=dev).copy_(x)
    A = random_window((6, 5, 70), (1, 3, 10), device=dev).copy_(A)
    buffer, v = guarded((37, 5), (4, 11), device=dev)
    order, offsets, adapters = spec_device_segments(ids, 6)
    longest = int((offsets[1:] - offsets[:-1]).max())
    ex.lora_shrink_kernel[(adapters.numel(), -(-longest // 16))](
        x, A, scales, v, order, offsets, adapters, 70, 5,
        *x.stride(), *A.stride(), *v.stride(),
        BLOCK_M=16, BLOCK_R=16, BLOCK_K=32, INPUT_PRECISION="ieee",
    )  # fmt: skip
    label = f"x (37, 70) window, A (6, 5, 70) window, v (37, 5) window of a NaN buffer, ids {ids.tolist()}"
    expect_guard_untouched(buffer, (37, 5), input=label, hint="mask the store by rows < end and r < R")
    adapted = ids >= 0
    expect(
        bool(v[~adapted].isnan().all()),
        "the kernel wrote rows of v for tokens without an adapter",
        input=label,
        expected="rows of the -1 tokens untouched (NaN)",
        got=f"{int((~v[~adapted].isnan()).any(dim=1).sum())} such rows written",
        hint="segments start at seg_offsets[0]: the -1 tokens belong to no segment",
    )
    expect_close(v[adapted], loop_shrink(x, A, scales, ids)[adapted.cpu()], input=label, hint=HINT_TOKENS)


@checks("lora_shrink")
def shrink_kernel_uses_v_strides(ex):
    """the kernel writing into v a transposed window (strides (1, 44)): stride_vm and stride_vr both used"""
    x, A, _, scales, ids = case(37, 40, 8, 3, 6, torch.float32, none_fraction=0.2)
    buffer, window = guarded((6, 37), (2, 7), device=x.device)
    v = window.T  # (37, 6), column-major
    order, offsets, adapters = spec_device_segments(ids, 3)
    longest = int((offsets[1:] - offsets[:-1]).max())
    ex.lora_shrink_kernel[(adapters.numel(), -(-longest // 16))](
        x, A, scales, v, order, offsets, adapters, 40, 6,
        *x.stride(), *A.stride(), *v.stride(),
        BLOCK_M=16, BLOCK_R=16, BLOCK_K=32, INPUT_PRECISION="ieee",
    )  # fmt: skip
    label = f"v (37, 6) a transposed window with strides {v.stride()}, ids {ids.tolist()}"
    expect_guard_untouched(buffer, (6, 37), input=label, hint="address v with both of its strides")
    adapted = ids >= 0
    expect_close(v[adapted], loop_shrink(x, A, scales, ids)[adapted.cpu()], input=label,
                 hint="v_ptr + tok[:, None] * stride_vm + offs_r[None, :] * stride_vr")  # fmt: skip


def expect_shrink(ex, x, A, scales, ids, label, hint):
    order, offsets, adapters = spec_device_segments(ids, A.shape[0])
    got = ex.lora_shrink(x, A, scales, order, offsets, adapters)
    expect_tensor(got, shape=(x.shape[0], A.shape[1]), dtype=torch.float32, input=label)
    expect_close(got, loop_shrink(x, A, scales, ids), baseline=loop_shrink(x, A, scales, ids, x.dtype), input=label,
                 hint=hint, dtype=x.dtype)  # fmt: skip


@checks("lora_shrink")
def shrink_hand_checkable(ex):
    """x = [[1, 2], [3, 4], [5, 6]], ids [1, -1, 0], A0 = [[1, 0]], A1 = [[1, 1]], scales [2, 0.5]: v = [[1.5], [0], [10]]"""
    dev = triton_device()
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], device=dev)
    A = torch.tensor([[[1.0, 0.0]], [[1.0, 1.0]]], device=dev)
    ids = torch.tensor([1, -1, 0], device=dev)
    order, offsets, adapters = spec_device_segments(ids, 2)
    got = ex.lora_shrink(x, A, torch.tensor([2.0, 0.5], device=dev), order, offsets, adapters)
    expect_close(got, torch.tensor([[1.5], [0.0], [10.0]], dtype=torch.float64),
                 input="x [[1, 2], [3, 4], [5, 6]], ids [1, -1, 0], A0 = [[1, 0]], A1 = [[1, 1]], scales [2, 0.5]",
                 hint="v[t] = scales[a] * x[t] @ A[a].T; zero for a token without adapter")  # fmt: skip


@checks("lora_shrink")
def shrink_ranks_shapes_and_dtypes(ex):
    """ranks 1, 8, 16, 20 and 128 (the largest allowed), K not a multiple of BLOCK_K, segments longer than BLOCK_M, one
    segment only, fp32 and fp16 (bf16 compiled)"""
    for dtype in triton_dtypes():
        for T, K, L, R, none, used in (
            (40, 70, 5, 8, 0.2, None),
            (9, 33, 3, 16, 0.0, None),
            (50, 64, 2, 20, 0.1, None),
            (6, 17, 4, 1, 0.5, None),
            (12, 20, 4, 8, 0.3, 1),
            (5, 16, 2, 128, 0.0, None),
        ):
            x, A, _, scales, ids = case(T, K, 4, L, R, dtype, none_fraction=none, used=used)
            expect_shrink(ex, x, A, scales, ids, f"{describe(x=x, A=A)}, ids {ids.tolist()[:16]}...",
                          HINT_TOKENS + "; mask K (other=0.0) and r < R; multiply by the segment's scale once")  # fmt: skip


@checks("lora_shrink")
def shrink_strided_inputs(ex):
    """x a column slice, A a transposed view (L, K, R).transpose(1, 2): every stride from .stride(i)"""
    x, A, _, scales, ids = case(30, 40, 4, 4, 8, torch.float32)
    x_s = torch.zeros(30, 80, device=x.device)[:, ::2].copy_(x)
    A_t = torch.zeros(4, 40, 8, device=x.device).transpose(1, 2).copy_(A)
    expect_shrink(ex, x_s, A_t, scales, ids, f"x strides {x_s.stride()}, A (4, 8, 40) strides {A_t.stride()}",
                  "build pointers from stride_xm/stride_xk and stride_al/stride_ar/stride_ak")  # fmt: skip


@checks("lora_shrink")
def shrink_operands_in_their_own_layouts(ex):
    """x, A, scales, order, seg_offsets and seg_adapter each in a layout of its own (x a fused slice, A padded rows,
    the 1-D tensors columns of wider tensors), same values as contiguous copies"""
    x, A, _, scales, ids = case(30, 40, 4, 4, 8, torch.float32)
    order, offsets, adapters = spec_device_segments(ids, 4)
    lx, lA, ls, lo, loff, lad = own_layouts(x, A, scales, order, offsets, adapters)
    label = strides_label(x=lx, A=lA, scales=ls, order=lo, seg_offsets=loff, seg_adapter=lad)
    got = ex.lora_shrink(lx, lA, ls, lo, loff, lad)
    expect_tensor(got, shape=(30, 8), dtype=torch.float32, input=label)
    expect_close(got, loop_shrink(x, A, scales, ids), input=label, hint=HINT_OWN)


@checks("lora_shrink", requires_compiled=True)
def shrink_at_scale(ex):
    """4096 tokens over 16 adapters of rank 16, K = 4096, fp16 and bf16"""
    for dtype in triton_dtypes():
        x, A, _, scales, ids = case(4096, 4096, 8, 16, 16, dtype)
        expect_shrink(ex, x, A, scales, ids, describe(x=x, A=A), HINT_TOKENS)


@checks("lora_shrink")
def shrink_refuses_bad_input(ex):
    """K mismatch, mixed dtypes, scales of the wrong length, rank above 128"""
    dev = triton_device()
    x = torch.randn(4, 8, device=dev)
    seg = spec_device_segments(torch.tensor([0, 1, 0, -1], device=dev), 2)
    for label, A, scales in (
        ("x (4, 8), A (2, 4, 7)", torch.randn(2, 4, 7, device=dev), torch.ones(2, device=dev)),
        ("x float32, A float16", torch.randn(2, 4, 8, device=dev).half(), torch.ones(2, device=dev)),
        ("scales (3,) for L = 2", torch.randn(2, 4, 8, device=dev), torch.ones(3, device=dev)),
        ("rank 129", torch.randn(2, 129, 8, device=dev), torch.ones(2, device=dev)),
    ):
        expect_refused(lambda A=A, s=scales: ex.lora_shrink(x, A, s, *seg), input=label,
                       hint="validate shapes and dtypes before launching")  # fmt: skip


# ------------------------------------------------------------------------------------------------ lora_expand


@checks("lora_expand", gate=True)
def expand_adds_only_into_adapted_rows(ex):
    """the kernel on a window of a larger y, T=37 N=29 R=5: guards and the -1 tokens' rows untouched, the rest added"""
    _, _, B, _, ids = case(37, 8, 29, 6, 5, torch.float32, none_fraction=0.3, used=4)
    dev = triton_device()
    v = torch.randn(37, 5, device=dev)
    buffer, y = guarded((37, 29), (3, 9), device=dev, fill=0.0)
    buffer.normal_()
    snapshot = buffer.clone()
    y0 = y.clone()
    order, offsets, adapters = spec_device_segments(ids, 6)
    longest = int((offsets[1:] - offsets[:-1]).max())
    ex.lora_expand_kernel[(adapters.numel(), -(-longest // 16), -(-29 // 16))](
        v, B, y, order, offsets, adapters, 29, 5,
        *v.stride(), *B.stride(), *y.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_R=16, INPUT_PRECISION="ieee",
    )  # fmt: skip
    label = f"y (37, 29) window of a (40, 38) buffer, v (37, 5), B (6, 29, 5), ids {ids.tolist()}"
    expect_guard_untouched(buffer, (37, 29), input=label, hint="mask rows < end and cols < N", snapshot=snapshot)
    expect_close(y, loop_expand(y0, v, B, ids), input=label,
                 hint="load y at the token rows, add v @ B[a].T in float32, store; the -1 tokens' rows stay")  # fmt: skip


def expect_expand(ex, y, v, B, ids, label, hint):
    order, offsets, adapters = spec_device_segments(ids, B.shape[0])
    y0 = y.clone()
    got = ex.lora_expand(y, v, B, order, offsets, adapters)
    expect(got is y or got.data_ptr() == y.data_ptr(), "lora_expand must add into y in place and return it",
           input=label, expected="the y tensor that was passed", got="another tensor",
           hint="launch on y itself and return y")  # fmt: skip
    expect_close(y, loop_expand(y0, v, B, ids), baseline=loop_expand(y0, v, B, ids, y.dtype), input=label, hint=hint)


@checks("lora_expand")
def expand_kernel_uses_every_stride(ex):
    """the kernel with v and y transposed windows and B a transposed view (L, R, N).transpose(1, 2)"""
    _, _, B, _, ids = case(37, 4, 29, 3, 6, torch.float32, none_fraction=0.2)
    dev = B.device
    B_t = torch.zeros(3, 6, 29, device=dev).transpose(1, 2).copy_(B)  # (3, 29, 6), stride_br = 29
    v = torch.zeros(6, 37, device=dev).T.copy_(torch.randn(37, 6))  # (37, 6), strides (1, 37)
    buffer, window = guarded((29, 37), (3, 5), device=dev, fill=0.0)
    buffer.normal_()
    snapshot = buffer.clone()
    y = window.T  # (37, 29), column-major
    y0 = y.clone()
    order, offsets, adapters = spec_device_segments(ids, 3)
    longest = int((offsets[1:] - offsets[:-1]).max())
    ex.lora_expand_kernel[(adapters.numel(), -(-longest // 16), -(-29 // 16))](
        v, B_t, y, order, offsets, adapters, 29, 6,
        *v.stride(), *B_t.stride(), *y.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_R=16, INPUT_PRECISION="ieee",
    )  # fmt: skip
    label = f"v strides {v.stride()}, B (3, 29, 6) strides {B_t.stride()}, y (37, 29) strides {y.stride()}"
    expect_guard_untouched(buffer, (29, 37), input=label, hint="address y with both strides", snapshot=snapshot)
    expect_close(y, loop_expand(y0, v, B_t, ids), input=label,
                 hint="every pointer from its strides: stride_vm/stride_vr, stride_bl/stride_bn/stride_br, stride_ym/stride_yn")  # fmt: skip


@checks("lora_expand")
def expand_operands_in_their_own_layouts(ex):
    """y (updated in place), v, B, order, seg_offsets and seg_adapter each in a layout of its own, same values as
    contiguous copies; then add_lora with y, x, ids, A, B and scales each in a layout of its own"""
    x, A, B, scales, ids = case(30, 24, 20, 4, 8, torch.float32)
    y = torch.randn(30, 20, device=B.device)
    v = torch.randn(30, 8, device=B.device)
    order, offsets, adapters = spec_device_segments(ids, 4)
    ly, lv, lB, lo, loff, lad = own_layouts(y, v, B, order, offsets, adapters)
    label = strides_label(y=ly, v=lv, B=lB, order=lo, seg_offsets=loff, seg_adapter=lad)
    ex.lora_expand(ly, lv, lB, lo, loff, lad)
    expect_close(ly, loop_expand(y, v, B, ids), input=label + ", y after the call", hint=HINT_OWN)
    ly, lx, lids, lA, lB, ls = own_layouts(y, x, ids, A, B, scales)
    label = "add_lora, " + strides_label(y=ly, x=lx, adapter_ids=lids, A=lA, B=lB, scales=ls)
    ex.add_lora(ly, lx, lids, lA, lB, ls)
    want = loop_expand(y, loop_shrink(x, A, scales, ids), B, ids)
    expect_close(ly, want, input=label + ", y after the call", hint=HINT_OWN)


@checks("lora_expand")
def expand_hand_checkable(ex):
    """y = ones (3, 2), v = [[1], [5], [2]], ids [0, -1, 1], B0 = [[1], [2]], B1 = [[-1], [3]]: [[2, 3], [1, 1], [-1, 7]]"""
    dev = triton_device()
    y = torch.ones(3, 2, device=dev)
    v = torch.tensor([[1.0], [5.0], [2.0]], device=dev)
    B = torch.tensor([[[1.0], [2.0]], [[-1.0], [3.0]]], device=dev)
    ids = torch.tensor([0, -1, 1], device=dev)
    order, offsets, adapters = spec_device_segments(ids, 2)
    ex.lora_expand(y, v, B, order, offsets, adapters)
    expect_close(y, torch.tensor([[2.0, 3.0], [1.0, 1.0], [-1.0, 7.0]], dtype=torch.float64),
                 input="y = ones (3, 2), v [[1], [5], [2]], ids [0, -1, 1], B0 [[1], [2]], B1 [[-1], [3]]",
                 hint="y[t] += v[t] @ B[a].T; the -1 token keeps its base output")  # fmt: skip


@checks("lora_expand")
def expand_shapes_and_dtypes(ex):
    """N not a multiple of BLOCK_N and N = 1, ranks 1, 8, 20, 128, long segments, one segment only, y in fp32 and fp16
    (bf16 compiled)"""
    for dtype in triton_dtypes():
        for T, N, L, R, used in (
            (40, 70, 5, 8, None),
            (9, 33, 3, 20, None),
            (50, 16, 2, 1, None),
            (7, 1, 3, 4, None),
            (5, 20, 2, 128, None),
            (20, 24, 4, 8, 1),
        ):
            _, _, B, _, ids = case(T, 4, N, L, R, dtype, used=used)
            y = torch.randn(T, N).to(dtype).to(B.device)
            v = torch.randn(T, R, device=B.device)
            expect_expand(ex, y, v, B, ids, f"{describe(y=y, B=B)}, ids {ids.tolist()[:16]}...",
                          HINT_TOKENS + "; read-add-write y, masked by rows, r < R and cols < N")  # fmt: skip


def peft_reference(x, A, B, scales, ids, W):
    """PEFT's mixed-adapter batch on a one-layer module with base weight W and L adapters (float64)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import peft

        L, R, K = A.shape

        class OneLayer(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(K, W.shape[0], bias=False, dtype=torch.float64)

        model = OneLayer()
        for a in range(L):
            config = peft.LoraConfig(r=R, lora_alpha=float(scales[a]) * R, target_modules=["proj"], lora_dropout=0.0)
            model = peft.inject_adapter_in_model(config, model, adapter_name=f"adapter{a}")
        layer = model.proj
        with torch.no_grad():
            layer.base_layer.weight.copy_(W.double().cpu())
            for a in range(L):
                layer.lora_A[f"adapter{a}"].weight.copy_(A[a].double().cpu())
                layer.lora_B[f"adapter{a}"].weight.copy_(B[a].double().cpu())
            names = [f"adapter{a}" if a >= 0 else "__base__" for a in ids.tolist()]
            return layer(x.double().cpu()[:, None, :], adapter_names=names)[:, 0, :]


def expect_layer(ex, T, K, N, L, R, dtype, none_fraction, used=None, seed=0, peft_too=False):
    x, A, B, scales, ids = case(T, K, N, L, R, dtype, none_fraction, used, seed)
    W = (torch.randn(N, K) / math.sqrt(K)).to(dtype).to(x.device)
    y = (x.cpu().double() @ W.cpu().double().T).to(dtype).to(x.device)  # the base output, computed by the caller
    y0 = y.clone()
    label = f"{describe(x=x, A=A, B=B)}, ids {ids.tolist()[:16]}{'...' if T > 16 else ''}"
    got = ex.add_lora(y, x, ids, A, B, scales)
    expect_tensor(got, shape=(T, N), dtype=dtype, input=label)
    oracle = loop_expand(y0, loop_shrink(x, A, scales, ids), B, ids)
    baseline = loop_expand(y0, loop_shrink(x, A, scales, ids, dtype), B, ids, dtype)
    hint = "segments, then shrink (scale once), then expand into y in place"
    expect_close(got, oracle, baseline=baseline, input=label + ", vs the per-token loop in float64", hint=hint)
    if peft_too:
        with reference_only():
            with_base = peft_reference(x, A, B, scales, ids, W)
        expect_close(got, with_base, baseline=baseline, input=label + ", vs PEFT's mixed-adapter batch", hint=hint)


@checks("lora_expand")
def add_lora_matches_peft_mixed_batch(ex):
    """the whole LoRA path (base output + adapters) equals PEFT's lora.Linear with adapter_names per token"""
    expect_layer(ex, 24, 32, 40, 4, 8, torch.float32, 0.25, peft_too=True)
    expect_layer(ex, 10, 16, 24, 3, 4, torch.float32, 0.0, used=1, seed=1, peft_too=True)


@checks("lora_expand")
def add_lora_edge_cases_and_dtypes(ex):
    """one token; every token on one adapter; most tokens without adapter; more adapters than the rank; fp16 (and bf16
    compiled)"""
    expect_layer(ex, 1, 16, 16, 3, 8, torch.float32, 0.0)
    expect_layer(ex, 30, 24, 20, 5, 16, torch.float32, 0.0, used=1, seed=2)
    expect_layer(ex, 30, 24, 20, 5, 16, torch.float32, 0.9, seed=3)
    expect_layer(ex, 25, 16, 12, 7, 4, torch.float32, 0.1, seed=6)  # more adapters (7) than the rank (4)
    for dtype in triton_dtypes()[1:]:
        expect_layer(ex, 35, 48, 40, 6, 16, dtype, 0.2, seed=4)
    if triton_compiled():
        for dtype in triton_dtypes():
            expect_layer(ex, 2048, 1024, 1024, 16, 16, dtype, 0.1, seed=5)


@checks("lora_expand")
def expand_refuses_bad_input(ex):
    """B whose rank or adapter count differs from A's, y or adapter_ids with the wrong row count, lora_expand with a B
    for another N or a rank above 128"""
    dev = triton_device()
    x, A, B, scales, _ = case(6, 8, 5, 2, 4, torch.float32)
    ids = torch.tensor([0, 1, 1, -1, 0, 1], device=dev)
    y = torch.zeros(6, 5, device=dev)
    seg = spec_device_segments(ids, 2)
    for label, call in (
        ("A (2, 4, 8), B (2, 5, 3)", lambda: ex.add_lora(y, x, ids, A, B[:, :, :3], scales)),
        ("A (2, 4, 8) for 2 adapters, B (1, 5, 4) for 1", lambda: ex.add_lora(y, x, ids, A, B[:1], scales)),
        ("y (5, 5) for 6 tokens", lambda: ex.add_lora(y[:5], x, ids, A, B, scales)),
        ("adapter_ids (5,) for 6 tokens", lambda: ex.add_lora(y, x, ids[:5], A, B, scales)),
        ("lora_expand with B (2, 6, 4) for y (6, 5)", lambda: ex.lora_expand(y, torch.zeros(6, 4, device=dev),
                                                                          torch.zeros(2, 6, 4, device=dev), *seg)),
        ("lora_expand with rank 129", lambda: ex.lora_expand(y, torch.zeros(6, 129, device=dev),
                                                             torch.zeros(2, 5, 129, device=dev), *seg)),
    ):  # fmt: skip
        expect_refused(call, input=label, hint="check that the shapes agree before launching")


# ------------------------------------------------------------------------------------------------ benchmark


def gather_bmm(y, x, ids, A, B, scales):
    """The PyTorch version a user writes first: every token's adapter gathered, then two batched matmuls."""
    use = ids >= 0
    a = ids.clamp(min=0)
    v = torch.bmm(x[:, None, :], A[a].transpose(1, 2))  # (T, 1, R)
    delta = torch.bmm(v, B[a].transpose(1, 2))[:, 0, :]  # (T, N)
    return y + delta * (scales[a] * use)[:, None].to(y.dtype)


def benchmark(ex):
    """add_lora at a decode batch (64 tokens) and a prefill batch (4096), 16 adapters of rank 16, 4096 -> 4096."""
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for T in (64, 4096):
            rows += benchmark_case(ex, T, dtype)
    return rows


def benchmark_case(ex, T, dtype, K=4096, N=4096, L=16, R=16):
    torch.manual_seed(0)
    x = torch.randn(T, K, device="cuda", dtype=dtype)
    A = torch.randn(L, R, K, device="cuda", dtype=dtype) / math.sqrt(K)
    B = torch.randn(L, N, R, device="cuda", dtype=dtype)
    scales = torch.full((L,), 2.0, device="cuda")
    ids = random_ids(T, L, 0.1).cuda()
    y = torch.randn(T, N, device="cuda", dtype=dtype)
    used = int(ids[ids >= 0].unique().numel())
    nbytes = (T * (K + 2 * N) + used * R * (K + N)) * x.element_size()  # x read, y read and written, adapters once
    shape = f"T={T} L={L} r={R} {K}->{N} {str(dtype).removeprefix('torch.')}"
    rows = [bandwidth_row("add_lora (Triton SGMV)", shape, lambda: ex.add_lora(y, x, ids, A, B, scales), nbytes)]
    compiled = torch.compile(gather_bmm, dynamic=False)
    compiled(y, x, ids, A, B, scales)
    for name, fn in (("gather + bmm (eager)", gather_bmm), ("gather + bmm (torch.compile)", compiled)):
        rows.append(bandwidth_row(name, shape, lambda fn=fn: fn(y, x, ids, A, B, scales), nbytes))
    rows.append(copy_row(nbytes // 2))  # reads and writes nbytes // 2: the same bytes moved
    return rows
