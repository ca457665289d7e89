"""Checks for p00.tensor_basics. References: `Tensor.to` on the `meta` device (a second device on every machine),
`torch.tril` for causal masks, `F.scaled_dot_product_attention` with a boolean mask against the learner's additive
bias, `torch.finfo`, and float64 per-row loop specs (boolean indexing and `.mean()`, a Python loop over positions)
for the masked mean and the token accuracy."""

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, expect_value_error

checks = Checks("p00.tensor_basics")
checks.restrict(
    "masks",
    forbid=(torch.tril, torch.triu, torch.Tensor.tril, torch.Tensor.triu, torch.Tensor.tril_, torch.Tensor.triu_),
    instead="compare arange(T)[:, None] + offset with arange(S)[None, :] (torch.tril is the checks' reference)",
)

HALF = (torch.float16, torch.bfloat16)

# ------------------------------------------------------------------------------------------ move_batch


def llm_batch():
    return {
        "input_ids": torch.tensor([[128000, 9906, 1917, 128001], [128000, 15339, 128001, 128001]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        "padding_mask": torch.tensor([[True, True, True, True], [True, True, True, False]]),
        "pixel_values": torch.randn(2, 3, 4, 4, dtype=torch.float32),
        "loss_weights": torch.rand(2, 4, dtype=torch.float64),
        "num_items_in_batch": 7,
        "texts": ["hello world", "hi"],
    }


@checks("move_batch")
def floats_cast_ids_kept(ex):
    """to bfloat16 and float16 on the CPU: float tensors cast, int64 ids (128001 stays 128001), masks, others kept"""
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        batch = llm_batch()
        moved = ex.move_batch(batch, "cpu", dtype)
        label = f"batch of input_ids (int64, up to 128001), masks, float tensors, an int and a list -> {dtype}"
        expect(
            isinstance(moved, dict) and set(moved) == set(batch),
            "the keys of the result differ",
            input=label,
            expected=str(sorted(batch)),
            got=str(sorted(moved) if isinstance(moved, dict) else type(moved)),
        )
        for name in ("input_ids", "attention_mask", "padding_mask"):
            expect_tensor(
                moved[name],
                shape=tuple(batch[name].shape),
                dtype=batch[name].dtype,
                input=f"{label}: {name}",
                hint="only floating tensors change dtype; ids and masks keep theirs",
            )
            expect(
                torch.equal(moved[name], batch[name]),
                f"{name} changed",
                input=label,
                expected=str(batch[name].tolist()),
                got=str(moved[name].tolist()),
                hint="a token id cast to bfloat16 rounds (128001 -> 128000): never cast integer tensors",
            )
        for name in ("pixel_values", "loss_weights"):
            expect_tensor(
                moved[name],
                shape=tuple(batch[name].shape),
                dtype=dtype,
                input=f"{label}: {name}",
                hint="cast every floating tensor to dtype",
            )
            expect_close(moved[name], batch[name].double(), baseline=batch[name].to(dtype), input=f"{label}: {name}")
        expect(
            moved["num_items_in_batch"] == 7 and moved["texts"] == ["hello world", "hi"],
            "non-tensor values must pass through unchanged",
            input=label,
            got=f"{moved['num_items_in_batch']!r}, {moved['texts']!r}",
        )


@checks("move_batch")
def device_moves_every_tensor(ex):
    """to the meta device: every tensor moves (ids and masks too), floats also cast; Tensor.to is the reference"""
    batch = llm_batch()
    moved = ex.move_batch(batch, torch.device("meta"), torch.bfloat16)
    for name, value in batch.items():
        if not isinstance(value, torch.Tensor):
            continue
        expected = value.to(device="meta", dtype=torch.bfloat16) if value.is_floating_point() else value.to("meta")
        expect_tensor(
            moved[name],
            shape=tuple(expected.shape),
            dtype=expected.dtype,
            device=expected.device,
            input=f"{name} {describe(x=value)} -> meta, bfloat16",
            hint="move every tensor to the device; cast only the floating ones",
        )


@checks("move_batch")
def input_not_modified_and_bad_dtype_refused(ex):
    """the caller's dict keeps its tensors; dtype=torch.int64 or torch.bool is refused with ValueError"""
    batch = llm_batch()
    originals = {k: v for k, v in batch.items()}
    moved = ex.move_batch(batch, "cpu", torch.float16)
    expect(
        all(batch[k] is originals[k] for k in batch) and moved is not batch,
        "the input dict was modified (or returned itself)",
        input="move_batch(batch, 'cpu', float16)",
        expected="a new dict; batch['pixel_values'] still float32",
        got=f"batch['pixel_values'] is {batch['pixel_values'].dtype}",
        hint="build a new dict instead of assigning into the caller's",
    )
    for dtype in (torch.int64, torch.bool):
        expect_value_error(
            lambda d=dtype: ex.move_batch(llm_batch(), "cpu", d),
            f"dtype={dtype}",
            "a model dtype must be floating (dtype.is_floating_point)",
        )


# ------------------------------------------------------------------------------------------ masks


@checks("masks")
def causal_mask_matches_tril(ex):
    """causal_mask(T, S) equals ones(T, S).tril(S - T) for prefill, chunks and decoding (T = 1), S up to 37"""
    for T, S in [(1, 1), (5, None), (4, 9), (1, 37), (13, 13), (7, 20)]:
        got = ex.causal_mask(T, S)
        width = T if S is None else S
        expected = torch.ones(T, width, dtype=torch.bool).tril(width - T)
        label = f"causal_mask({T}, {S})"
        expect_tensor(got, shape=(T, width), dtype=torch.bool, input=label, hint="a (T, S) bool tensor")
        expect(
            torch.equal(got, expected),
            "the mask differs",
            input=label,
            expected=str(expected.int().tolist()) if width <= 9 else f"{int(expected.sum())} allowed pairs",
            got=str(got.int().tolist()) if width <= 9 else f"{int(got.sum())} allowed pairs",
            hint="allowed where s <= t + (S - T): the T queries are the last T of S positions",
        )
    meta = ex.causal_mask(3, 5, device="meta")
    expect_tensor(
        meta,
        shape=(3, 5),
        dtype=torch.bool,
        device=torch.device("meta"),
        input="causal_mask(3, 5, device='meta')",
        hint="create the aranges on `device`",
    )


@checks("masks")
def bias_in_attention_equals_bool_mask(ex):
    """SDPA with attention_bias(mask, dtype) equals SDPA with the bool mask (float32, float64, bfloat16, float16)"""
    for dtype, (T, S) in [
        (torch.float32, (5, 5)),
        (torch.float64, (3, 8)),
        (torch.bfloat16, (1, 6)),
        (torch.float16, (4, 7)),
    ]:
        allowed = torch.ones(T, S, dtype=torch.bool).tril(S - T)
        diagonal = torch.arange(S)[None, :] == torch.arange(T)[:, None] + (S - T)  # each query sees itself
        allowed = allowed & (torch.rand(T, S) < 0.8) | diagonal  # a padding-like mask
        q, k, v = (torch.randn(2, 3, n, 8, dtype=torch.float64) for n in (T, S, S))
        bias = ex.attention_bias(allowed, dtype)
        label = describe(allowed=allowed) + f", dtype={dtype}"
        expect_tensor(bias, shape=(T, S), dtype=dtype, input=label, hint="the bias has the scores' dtype")
        expect(
            bool((bias[allowed] == 0).all()),
            "the bias is not 0 where attention is allowed",
            input=label,
            hint="0 where allowed, a large negative value elsewhere",
        )
        expect(
            bool(torch.isfinite(bias).all()),
            "the bias has -inf (or nan)",
            input=label,
            expected=f"finite, {torch.finfo(dtype).min:.4g} at masked places",
            got=str(bias[~allowed][:3].tolist()),
            hint="use torch.finfo(dtype).min: -inf turns fully masked rows into NaN",
        )
        expect(
            bool((bias[~allowed] == torch.finfo(dtype).min).all()),
            "the masked value is not finfo(dtype).min",
            input=label,
            expected=f"{torch.finfo(dtype).min:.6g}",
            got=str(bias[~allowed][:3].tolist()),
            hint="the most negative finite value of *this* dtype (float16's is -65504)",
        )
        oracle = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
        got = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=bias)
        expect_close(
            got,
            oracle,
            baseline=F.scaled_dot_product_attention(qd, kd, vd, attn_mask=allowed),
            input=label + ", SDPA(q, k, v, attn_mask=bias)",
            hint="adding the bias must mask like the bool",
        )


@checks("masks")
def fully_masked_row_stays_finite(ex):
    """a row with every key masked (left padding) gives a finite softmax, not NaN, in float32 and float16"""
    allowed = torch.tensor([[True, True, False], [False, False, False]])
    for dtype in (torch.float32, torch.float16):
        scores = torch.randn(2, 3).to(dtype)
        probs = torch.softmax((scores + ex.attention_bias(allowed, dtype)).float(), dim=-1)
        expect(
            bool(torch.isfinite(probs).all()),
            "softmax of a fully masked row is NaN",
            input=f"{dtype}",
            got=str(probs.tolist()),
            hint="a finite minimum, not -inf, and in the scores' dtype",
        )


@checks("masks")
def bad_arguments_refused(ex):
    """causal_mask(5, 3), causal_mask(0); attention_bias of an int mask or to int64: ValueError"""
    for call, label in [
        (lambda: ex.causal_mask(5, 3), "causal_mask(5, 3): more queries than keys"),
        (lambda: ex.causal_mask(0), "causal_mask(0)"),
        (lambda: ex.attention_bias(torch.ones(2, 2, dtype=torch.int64), torch.float32), "an int64 0/1 mask"),
        (lambda: ex.attention_bias(torch.ones(2, 2, dtype=torch.bool), torch.int64), "dtype=torch.int64"),
    ]:
        expect_value_error(call, label, "validate the arguments and say what was expected")


# ------------------------------------------------------------------------------------------ masked_reductions


def loop_masked_mean(x, mask, dim):
    """float64 spec: move `dim` last, then for each row the plain mean of the selected entries (0 when none)."""
    x64 = x.double().movedim(dim, -1)
    m = mask.expand(x.shape).movedim(dim, -1).bool()
    rows, out = x64.reshape(-1, x64.shape[-1]), []
    for row, keep in zip(rows, m.reshape(-1, m.shape[-1]), strict=True):
        out.append(row[keep].mean() if bool(keep.any()) else torch.zeros((), dtype=torch.float64))
    return torch.stack(out).reshape(x64.shape[:-1])


@checks("masked_reductions")
def masked_mean_matches_loop(ex):
    """mean pooling (B, T, C) over T with a (B, T, 1) mask, other dims, keepdim, four dtypes; empty rows give 0"""
    cases = [((3, 6, 5), (3, 6, 1), 1), ((2, 7), (2, 7), -1), ((4, 3, 2), (1, 3, 2), 0), ((2, 5, 9), (2, 5, 1), -2)]
    for shape, mask_shape, dim in cases:
        x64 = 3 * torch.randn(shape, dtype=torch.float64) + 1
        mask = torch.rand(mask_shape) < 0.6
        mask.view(-1)[0] = True
        if mask_shape[0] > 1:
            mask[1] = False  # one sample with no real token
        if mask_shape[0] > 2:
            mask[2] = False
            mask[2].view(-1)[-1] = True  # and one with exactly one
        oracle = loop_masked_mean(x64, mask, dim)
        for dtype in (torch.float32, torch.float64, *HALF):
            x = x64.to(dtype)
            for keepdim in (False, True):
                got = ex.masked_mean(x, mask, dim, keepdim=keepdim)
                want = oracle.unsqueeze(dim if dim >= 0 else len(shape) + dim) if keepdim else oracle
                label = describe(x=x, mask=mask) + f", dim={dim}, keepdim={keepdim}"
                expect_tensor(
                    got,
                    shape=tuple(want.shape),
                    dtype=dtype,
                    input=label,
                    hint="keepdim keeps the reduced axis with size 1; return x's dtype",
                )
                baseline = (x * mask).sum(dim, keepdim=keepdim) / mask.expand(shape).sum(dim, keepdim=keepdim).clamp(
                    min=1
                )
                expect_close(
                    got,
                    want,
                    baseline=baseline,
                    input=label,
                    hint="divide by the number of true entries (at least 1), not by the length",
                )


@checks("masked_reductions")
def masked_mean_long_fp16_rows(ex):
    """float16 mean pooling over 3000 tokens of values near 60: the sum (180,000) overflows float16, the mean does not"""
    x = (60 + torch.randn(2, 3000, 4, dtype=torch.float64)).to(torch.float16)
    mask = torch.rand(2, 3000, 1) < 0.9
    got = ex.masked_mean(x, mask, 1)
    label = describe(x=x, mask=mask) + ", dim=1, values ~ 60"
    expect_tensor(got, shape=(2, 4), dtype=torch.float16, input=label)
    expect(
        bool(torch.isfinite(got).all()),
        "the mean overflowed to inf",
        input=label,
        expected="about 60",
        got=str(got.tolist()),
        hint="sum in float32 (the sum exceeds float16's 65504), cast the mean back",
    )
    baseline = ((x.float() * mask).sum(1) / mask.sum(1)).to(torch.float16)
    expect_close(got, loop_masked_mean(x, mask, 1), baseline=baseline, input=label)


@checks("masked_reductions")
def masked_mean_refuses_bad_masks(ex):
    """a mask of the wrong length, or one that would enlarge x: ValueError"""
    x = torch.randn(2, 5, 3)
    for mask, label in [
        (torch.ones(2, 4, 1, dtype=torch.bool), "mask (2, 4, 1) for x (2, 5, 3)"),
        (torch.ones(3, 2, 5, 3, dtype=torch.bool), "mask (3, 2, 5, 3) for x (2, 5, 3)"),
    ]:
        expect_value_error(
            lambda m=mask: ex.masked_mean(x, m, 1),
            label,
            "check torch.broadcast_shapes(x.shape, mask.shape) == x.shape",
        )


def loop_accuracy(logits, targets, ignore_index):
    flat_logits, flat_targets = logits.reshape(-1, logits.shape[-1]).tolist(), targets.reshape(-1).tolist()
    kept = right = 0
    for row, target in zip(flat_logits, flat_targets, strict=True):
        if target == ignore_index:
            continue
        kept += 1
        right += int(max(range(len(row)), key=row.__getitem__) == target)
    return right / kept if kept else float("nan")


@checks("masked_reductions")
def token_accuracy_matches_loop(ex):
    """accuracy over (B, T, V) logits with ignored targets, T == V (a wrong argmax axis still runs), bf16 logits"""
    for B, T, V, ignore_index, dtype in [
        (2, 5, 11, -100, torch.float32),
        (3, 6, 6, -100, torch.float32),
        (1, 9, 4, 0, torch.float64),
        (4, 7, 7, -1, torch.bfloat16),
    ]:
        logits = torch.randn(B, T, V, dtype=torch.float64)
        targets = torch.randint(0, V, (B, T))
        hits = torch.rand(B, T) < 0.5
        targets[hits] = logits.argmax(-1)[hits]  # make about half of them right
        targets[torch.rand(B, T) < 0.3] = ignore_index
        targets[0, 0] = ignore_index
        logits = logits.to(dtype)
        expected = loop_accuracy(logits.float(), targets, ignore_index)
        got = ex.token_accuracy(logits, targets, ignore_index=ignore_index)
        label = describe(logits=logits, targets=targets) + f", ignore_index={ignore_index}"
        expect_tensor(got, shape=(), dtype=torch.float32, input=label, hint="a 0-d float32 tensor")
        expect(
            abs(float(got) - expected) < 1e-6,
            "accuracy differs",
            input=label,
            expected=f"{expected:.6f}",
            got=f"{float(got):.6f}",
            hint="argmax over the last (vocabulary) axis; count only targets != ignore_index, in both numerator and denominator",
        )


@checks("masked_reductions")
def token_accuracy_edges(ex):
    """every target ignored gives NaN; targets of the wrong shape are refused with ValueError"""
    logits = torch.randn(2, 3, 5)
    got = ex.token_accuracy(logits, torch.full((2, 3), -100))
    expect(bool(torch.isnan(got)), "all targets ignored", input="targets all -100", expected="nan (0/0)", got=str(got))
    expect_value_error(
        lambda: ex.token_accuracy(logits, torch.zeros(2, 5, dtype=torch.int64)),
        "logits (2, 3, 5), targets (2, 5)",
        "targets must be logits.shape[:-1]",
    )
    expect_value_error(
        lambda: ex.token_accuracy(logits, torch.zeros(6, dtype=torch.int64)),
        "logits (2, 3, 5), targets (6,)",
        "targets must be logits.shape[:-1]",
    )
