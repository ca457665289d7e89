"""Checks for p03.cross_entropy. References: `F.cross_entropy` in float64 and float64 autograd through it (the loss
and the gradient that the kernel writes in place of the logits), a hand-computed row ([0, ln 2, ln 3]), and guard
elements around the logits and loss windows that catch writes a missing mask lets through (a gate). Small shapes
under the interpreter (rows of 1..1000 entries, blocks that do not divide them); 128k vocabularies when compiled."""

import math

import torch
import torch.nn.functional as F

from llm_algo.bench import bandwidth_row, baseline_rows, copy_row
from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    expect_refused_or_correct,
    expect_tensor,
)
from llm_algo.check.restrictions import AUTOGRAD, CROSS_ENTROPY, LOGSUMEXP, SOFTMAX
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded
from llm_algo.references.layouts import UNIT_LAST_STRIDE, describe_layouts, with_layout

checks = Checks("p03.cross_entropy", triton=True)
checks.in_place("cross_entropy_fwd_bwd", "logits")  # overwritten with the gradient (the lesson's memory trick)
checks.in_place("fused_cross_entropy", "logits")
checks.restrict(
    "cross_entropy_fwd_bwd",
    "fused_cross_entropy",
    kernel=True,
    forbid=[*CROSS_ENTROPY, *LOGSUMEXP, *SOFTMAX, *AUTOGRAD],
    instead="compute the loss and its gradient in your @triton.jit kernel (F.cross_entropy is the checks' reference)",
)
HINT_LSE = "online log-sum-exp: pad with -inf, rescale d by exp(m_old - m_new), subtract 0 while the max is -inf"
HINT_GRAD = "grad = (exp(x - M) / S - [col == target]) / n_valid, with n_valid the number of non-ignored rows"


def random_problem(n_rows, n_cols, dtype, scale=3.0, ignored_fraction=0.25, ignore_index=-100):
    logits = (torch.randn(n_rows, n_cols, device=triton_device()) * scale).to(dtype)
    targets = torch.randint(0, n_cols, (n_rows,), device=triton_device())
    ignored = torch.rand(n_rows, device=triton_device()) < ignored_fraction
    ignored[0] = False  # at least one row counts
    return logits, torch.where(ignored, torch.full_like(targets, ignore_index), targets)


def reference(logits, targets, ignore_index=-100):
    """(mean loss, gradient) by float64 autograd through F.cross_entropy, on the same (rounded) logits."""
    x = logits.detach().double().cpu().requires_grad_(True)
    loss = F.cross_entropy(x, targets.cpu(), ignore_index=ignore_index)
    loss.backward()
    return loss.detach(), x.grad


def float32_gradient(logits, targets, ignore_index=-100):
    """What a framework computes in float32 for the same logits, cast to their dtype: the tolerance baseline."""
    x = logits.detach().float().cpu().requires_grad_(True)
    F.cross_entropy(x, targets.cpu(), ignore_index=ignore_index).backward()
    return x.grad.to(logits.dtype)


def check_loss_and_gradient(ex, logits, targets, label, ignore_index=-100, **kwargs):
    """Run cross_entropy_fwd_bwd on a copy of logits; compare the loss and the in-place gradient with autograd."""
    want_loss, want_grad = reference(logits, targets, ignore_index)
    work = logits.clone()
    loss = ex.cross_entropy_fwd_bwd(work, targets, ignore_index, **kwargs)
    expect_tensor(loss, shape=(), dtype=torch.float32, input=label, what="loss", hint="return a float32 scalar")
    expect_close(
        loss,
        want_loss,
        baseline=F.cross_entropy(logits.float(), targets, ignore_index=ignore_index),
        input=label,
        what="loss",
        hint="loss per row = lse - x[target]; mean over the rows whose target != ignore_index; " + HINT_LSE,
    )
    expect_close(
        work,
        want_grad,
        baseline=float32_gradient(logits, targets, ignore_index),
        input=label,
        what="logits after the call (the gradient)",
        hint=HINT_GRAD,
    )


# ------------------------------------------------------------------------------------ cross_entropy_fwd_bwd


@checks("cross_entropy_fwd_bwd", gate=True)
def kernel_stays_inside_strided_rows(ex):
    """launches cross_entropy_kernel on a strided 6x150 window (BLOCK_SIZE 64) and a loss window; guards survive"""
    n_rows, n_cols, pad = 6, 150, 50
    buffer, logits = guarded((n_rows, n_cols), (1, pad), device=triton_device())
    logits.copy_(torch.randn(n_rows, n_cols, device=triton_device()) * 3)
    original = logits.clone()
    loss_buffer, loss = guarded((n_rows,), (7,), device=triton_device())
    targets = torch.tensor([3, 149, -100, 0, 64, 127], device=triton_device())
    n_valid = 5
    ex.cross_entropy_kernel[(n_rows,)](logits, targets, loss, logits.stride(0), n_cols, n_valid, -100, BLOCK_SIZE=64)
    label = f"logits = a (6, 150) window with row stride {logits.stride(0)}, BLOCK_SIZE=64, target -100 in row 2"
    hint = "mask every load and store with start + cols < n_cols, in both passes and in the ignored-row branch"
    expect_guard_untouched(buffer, (n_rows, n_cols), input=label, hint=hint)
    expect_guard_untouched(loss_buffer, (n_rows,), input=label + "; loss (6,) window", hint="store one loss per row")
    want_loss, want_grad = reference(original, targets)
    per_row = F.cross_entropy(original.double().cpu(), targets.cpu(), reduction="none")
    expect_close(loss, per_row, input=label, what="per-row loss", hint="loss[row] = lse - x[target]; 0 when ignored")
    expect_close(logits, want_grad, input=label, what="logits after the kernel (the gradient)", hint=HINT_GRAD)


@checks("cross_entropy_fwd_bwd")
def hand_checkable_row(ex):
    """logits [[0, ln 2, ln 3]], target 2: loss = ln 2, gradient [1/6, 2/6, 3/6 - 1]; with BLOCK 2 (two chunks)"""
    for block in (2, 4096):
        logits = torch.tensor([[0.0, math.log(2.0), math.log(3.0)]], device=triton_device())
        label = f"logits=[[0, ln 2, ln 3]], targets=[2], block_size={block}"
        loss = ex.cross_entropy_fwd_bwd(logits, torch.tensor([2], device=triton_device()), block_size=block)
        expect_close(loss, torch.tensor(math.log(2.0), dtype=torch.float64), input=label, what="loss", hint=HINT_LSE)
        expect_close(
            logits,
            torch.tensor([[1 / 6, 2 / 6, 3 / 6 - 1]], dtype=torch.float64),
            input=label,
            what="logits after the call (the gradient)",
            hint="overwrite the row with softmax - one_hot(target), divided by n_valid (1 here)",
        )


@checks("cross_entropy_fwd_bwd")
def random_rows_and_dtypes(ex):
    """rows of 1, 129, 1000 entries, batch of one, ~25% ignored, fp32 and fp16 (bf16 too when compiled) vs autograd"""
    shapes = [(1, 1), (37, 129), (5, 1000), (1, 64)] + ([(512, 32000), (64, 128256)] if triton_compiled() else [])
    for dtype in triton_dtypes():
        for n_rows, n_cols in shapes:
            logits, targets = random_problem(n_rows, n_cols, dtype)
            check_loss_and_gradient(ex, logits, targets, describe(logits=logits, targets=targets), block_size=256)


@checks("cross_entropy_fwd_bwd")
def many_chunks_per_row(ex):
    """blocks of 16 and 128 over 300-entry rows: the max in the last chunk; the first 150 columns masked with -inf"""
    for block in (16, 128):
        logits, targets = random_problem(4, 300, torch.float32)
        logits[0, -1] = 40.0  # the max arrives in the last chunk: the running sum must be rescaled
        logits[1, :150] -= 20.0  # the first chunks are small, the max comes later
        logits[2, :150] = float("-inf")  # a vocabulary mask: the first chunks hold nothing but -inf
        targets[2] = 200
        label = describe(logits=logits, targets=targets) + f", block_size={block}, max last, row 2 starts with -inf"
        check_loss_and_gradient(ex, logits, targets, label, block_size=block)


@checks("cross_entropy_fwd_bwd")
def ignore_index_edge_cases(ex):
    """a custom ignore_index (a real class id), one valid row among many, and every row ignored (nan, zero gradient)"""
    logits, targets = random_problem(9, 70, torch.float32, ignored_fraction=0.0)
    custom = targets.clone()
    custom[::2] = 5
    check_loss_and_gradient(ex, logits, custom, describe(logits=logits) + ", ignore_index=5", ignore_index=5)
    one = torch.full_like(targets, -100)
    one[4] = 3
    check_loss_and_gradient(ex, logits, one, describe(logits=logits) + ", one valid row of 9")
    work = logits.clone()
    loss = ex.cross_entropy_fwd_bwd(work, torch.full_like(targets, -100))
    label = describe(logits=logits) + ", every target -100"
    expect(
        bool(torch.isnan(loss)) and bool((work == 0).all()),
        "an all-ignored batch must give a nan loss (0 / 0, like F.cross_entropy) and an all-zero gradient",
        input=label,
        expected="loss nan, logits all 0",
        got=f"loss {float(loss):.4g}, {int((work != 0).sum())} non-zero gradient entries",
        hint="ignored rows store zeros over the whole row; the mean is sum(loss) / n_valid with n_valid = 0",
    )


@checks("cross_entropy_fwd_bwd")
def huge_logits(ex):
    """fp32 logits of ~1e4 and fp16 of ~3e4: stable loss and gradient"""
    for dtype, scale in ((torch.float32, 1e4), (torch.float16, 1e4)):
        logits, targets = random_problem(6, 200, dtype, scale=1.0)
        logits = (logits.float() * scale).clamp(-3e4, 3e4).to(dtype)
        label = describe(logits=logits, targets=targets) + f", |logits| up to {float(logits.abs().max()):.3g}"
        check_loss_and_gradient(ex, logits, targets, label, block_size=64)


@checks("cross_entropy_fwd_bwd")
def near_ties_far_from_zero(ex):
    """fp32 logits 1e4 + N(0, 1) over 8 classes: softmax is shift-invariant, so the probabilities are ordinary"""
    logits, targets = random_problem(3, 8, torch.float32, scale=1.0, ignored_fraction=0.0)
    logits = logits + 1e4  # near-ties far from zero: lse = max + log(sum) rounds to ulp(1e4) ~ 1e-3 in float32
    label = describe(logits=logits, targets=targets) + ", logits 1e4 + N(0, 1): several classes near the max"
    check_loss_and_gradient(ex, logits, targets, label, block_size=8)


@checks("cross_entropy_fwd_bwd")
def rejects_inputs_it_cannot_handle(ex):
    """1-D logits, a transposed view, int32 or mis-shaped targets, and a target outside [0, V) raise"""
    device = triton_device()
    logits = torch.randn(4, 10, device=device)
    targets = torch.tensor([1, 2, 3, 4], device=device)
    cases = [
        ("logits (10,)", lambda: ex.cross_entropy_fwd_bwd(torch.randn(10, device=device), targets[:1])),
        (  # (4, 10) with strides (1, 4): the targets fit, so only the stride check can refuse it
            "logits (4, 10) = t.T (column stride 4)",
            lambda: ex.cross_entropy_fwd_bwd(torch.randn(10, 4, device=device).T, targets),
        ),
        ("targets int32", lambda: ex.cross_entropy_fwd_bwd(logits.clone(), targets.int())),
        ("targets (3,) for 4 rows", lambda: ex.cross_entropy_fwd_bwd(logits.clone(), targets[:3])),
        (
            "a target = 10 = V",
            lambda: ex.cross_entropy_fwd_bwd(logits.clone(), torch.tensor([1, 10, 3, 4], device=device)),
        ),
        ("a target = -1", lambda: ex.cross_entropy_fwd_bwd(logits.clone(), torch.tensor([1, -1, 3, 4], device=device))),
    ]
    for label, call in cases:
        expect_refused(
            call,
            input=label,
            hint="check logits.dim() == 2, stride(1) == 1, targets int64 (N,), non-ignored targets in [0, V)",
        )


@checks("cross_entropy_fwd_bwd")
def logits_and_targets_in_their_own_layouts(ex):
    """logits (5, 70) as a slice of a fused tensor, with padded rows and as a window of a bigger buffer (each read
    and overwritten through its own row stride); then targets every 3rd element of a buffer: refused or right"""
    logits, targets = random_problem(5, 70, torch.float32)
    for layout in UNIT_LAST_STRIDE:
        work = with_layout(logits, layout)
        label = describe_layouts(logits=work) + f" ({layout})"
        loss = ex.cross_entropy_fwd_bwd(work, targets)
        expect_loss_and_gradient(loss, work, logits, targets, label)
    work, strided = logits.clone(), with_layout(targets, "fused_slice")
    label = f"contiguous logits (5, 70), targets with stride {strided.stride(0)} (a column of a (5, 3) tensor)"
    expect_refused_or_correct(
        lambda: ex.cross_entropy_fwd_bwd(work, strided),
        lambda loss: expect_loss_and_gradient(loss, work, logits, targets, label + " (accepted, so it must be right)"),
        input=label,
        hint="the kernel reads targets_ptr + row: pass targets.contiguous(), or refuse a strided one (ValueError)",
    )


# ------------------------------------------------------------------------------------ fused_cross_entropy


def expect_loss_and_gradient(loss, work, logits, targets, label):
    """The loss and the gradient left in `work` (the logits' memory) vs float64 autograd on the original logits."""
    want_loss, want_grad = reference(logits, targets)
    baseline = F.cross_entropy(logits.float(), targets)
    expect_close(loss, want_loss, baseline=baseline, input=label, what="loss", hint=HINT_LSE)
    hint = "address row r at logits_ptr + r * logits.stride(0) (its own row stride), for the loads and the stores"
    expect_close(work, want_grad, baseline=float32_gradient(logits, targets), input=label, what="gradient", hint=hint)


def expect_gradient_reached(leaf, label):
    expect(
        leaf.grad is not None,
        "no gradient reached the logits",
        input=label,
        expected="leaf.grad set",
        got="None",
        hint="backward must return the saved gradient for logits (and None for targets, ignore_index)",
    )


@checks("fused_cross_entropy")
def logits_with_padded_rows(ex):
    """logits a (9, 70) window of a (9, 75) head output (row stride 75): the loss, and the gradient that reaches the
    head output vs float64 autograd; the 5 padding columns get none"""
    logits, targets = random_problem(9, 70, torch.float32)
    wide = torch.randn(9, 75, device=logits.device)
    wide[:, :70] = logits
    leaf = wide.requires_grad_(True)
    window = (leaf * 1)[:, :70]  # a non-leaf with row stride 75, as a slice of a head's output is
    label = describe_layouts(logits=window)
    loss = ex.fused_cross_entropy(window, targets)
    loss.backward()
    want_loss, want_grad = reference(logits, targets)
    expect_close(loss.detach(), want_loss, baseline=F.cross_entropy(logits.float(), targets), input=label)
    expect_gradient_reached(leaf, label)
    expect_close(
        leaf.grad,
        torch.cat((want_grad, torch.zeros(9, 5, dtype=torch.float64)), dim=1),
        input=label,
        what="grad of the (9, 75) head output",
        hint="the kernel writes the gradient through the logits' row stride; return that tensor from backward",
    )


@checks("fused_cross_entropy")
def backward_matches_autograd(ex):
    """loss.backward() through your Function: loss and d loss / d logits vs float64 autograd; fp32 and fp16"""
    for dtype in triton_dtypes():
        for n_rows, n_cols in ((7, 50), (1, 300)):
            logits, targets = random_problem(n_rows, n_cols, dtype)
            leaf = logits.clone().requires_grad_(True)
            loss = ex.fused_cross_entropy(leaf * 1, targets)  # a non-leaf, as a head's output is
            loss.backward()
            want_loss, want_grad = reference(logits, targets)
            label = describe(logits=logits, targets=targets)
            expect_close(loss.detach(), want_loss, baseline=F.cross_entropy(logits.float(), targets), input=label)
            expect_gradient_reached(leaf, label)
            expect_close(
                leaf.grad,
                want_grad,
                baseline=float32_gradient(logits, targets),
                input=label,
                what="grad",
                hint="save the logits tensor after the kernel ran: it holds the gradient",
            )


@checks("fused_cross_entropy")
def grad_output_is_applied(ex):
    """(0.5 * loss + 3 * loss).backward(): the saved gradient is scaled by grad_output (3.5)"""
    logits, targets = random_problem(5, 40, torch.float32)
    leaf = logits.clone().requires_grad_(True)
    loss = ex.fused_cross_entropy(leaf * 1, targets)
    (0.5 * loss + 3 * loss).backward()
    _, want_grad = reference(logits, targets)
    expect_close(
        leaf.grad,
        want_grad * 3.5,
        input=describe(logits=logits, targets=targets) + ", backward of 3.5 * loss",
        what="grad",
        hint="backward(ctx, grad_output) must return saved_gradient * grad_output",
    )


@checks("fused_cross_entropy")
def backward_reuses_the_gradient_buffer(ex):
    """the gradient that reaches the logits (a hook sees it) lives in the logits' own storage: no new (N, V) tensor"""
    logits, targets = random_problem(6, 90, torch.float32)
    leaf = logits.clone().requires_grad_(True)
    head = leaf * 1  # the head's output: the kernel overwrites it with the gradient
    seen = []
    head.register_hook(lambda grad: seen.append(grad))
    (2.5 * ex.fused_cross_entropy(head, targets)).backward()
    label = describe(logits=logits, targets=targets) + ", backward of 2.5 * loss"
    _, want_grad = reference(logits, targets)
    expect(len(seen) == 1, "no gradient reached the logits", input=label, expected="1 gradient", got=f"{len(seen)}")
    expect_close(seen[0], want_grad * 2.5, input=label, what="gradient reaching the logits", hint="saved * grad_output")
    same = seen[0].untyped_storage().data_ptr() == head.untyped_storage().data_ptr()
    expect(
        same,
        "the backward allocated a new (N, V) gradient instead of reusing the buffer the kernel wrote",
        input=label,
        expected=f"storage at {head.untyped_storage().data_ptr():#x} (the logits')",
        got=f"storage at {seen[0].untyped_storage().data_ptr():#x}",
        hint="scale in place and return the saved tensor: grad.mul_(grad_output); return grad, None, None",
    )


@checks("fused_cross_entropy")
def output_head_gradients(ex):
    """logits = hidden @ W.T, then your loss: d/d hidden and d/d W equal float64 autograd, ignored rows included"""
    hidden = torch.randn(9, 16, device=triton_device())
    weight = torch.randn(70, 16, device=triton_device()) * 0.5
    targets = torch.randint(0, 70, (9,), device=triton_device())
    targets[[2, 5]] = -100
    h, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    ex.fused_cross_entropy(h @ w.T, targets).backward()
    h64, w64 = hidden.double().cpu().requires_grad_(True), weight.double().cpu().requires_grad_(True)
    F.cross_entropy(h64 @ w64.T, targets.cpu()).backward()
    h32, w32 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    F.cross_entropy(h32 @ w32.T, targets).backward()  # the float32 baseline, on the same device
    label = describe(hidden=hidden, weight=weight, targets=targets) + ", rows 2 and 5 ignored"
    for name, got, want, baseline in (
        ("hidden.grad", h.grad, h64.grad, h32.grad),
        ("weight.grad", w.grad, w64.grad, w32.grad),
    ):
        expect_close(
            got,
            want,
            baseline=baseline,
            input=label,
            what=name,
            dtype=torch.float32,
            hint="the head's matmul backward consumes your gradient: it must be (softmax - one_hot) / n_valid",
        )


@checks("fused_cross_entropy")
def all_ignored_batch(ex):
    """every target ignored: the loss is nan (as F.cross_entropy) and the gradient is zero"""
    logits, _ = random_problem(4, 30, torch.float32)
    leaf = logits.clone().requires_grad_(True)
    loss = ex.fused_cross_entropy(leaf * 1, torch.full((4,), -100, device=triton_device()))
    loss.backward()
    label = describe(logits=logits) + ", every target -100"
    expect(
        bool(torch.isnan(loss)) and leaf.grad is not None and bool((leaf.grad == 0).all()),
        "an all-ignored batch must give a nan loss and a zero gradient",
        input=label,
        expected="loss nan, grad all 0",
        got=f"loss {float(loss):.4g}, grad {'None' if leaf.grad is None else 'max ' + str(float(leaf.grad.abs().max()))}",
        hint="no special case needed beyond the kernel's ignored rows and sum / n_valid",
    )


# ------------------------------------------------------------------------------------ benchmark


def _torch_cross_entropy_fwd_bwd(logits, targets):
    loss = F.cross_entropy(logits.float(), targets)
    return torch.autograd.grad(loss, logits)[0]


def benchmark(ex):
    """Issue 4's yardstick: forward + backward at 8192 x 128256 bf16, next to eager, torch.compile and a copy."""
    n_rows, n_cols = 8192, 128256
    logits = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, n_cols, (n_rows,), device="cuda")
    moved = 2 * logits.numel() * logits.element_size()  # read the logits once, write the gradient once
    shape = f"{n_rows}x{n_cols} bf16"
    rows = [
        bandwidth_row(
            "cross_entropy_fwd_bwd (fused, in place)", shape, lambda: ex.cross_entropy_fwd_bwd(logits, targets), moved
        )
    ]
    leaf = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    rows += baseline_rows(
        "F.cross_entropy fwd+bwd", shape, _torch_cross_entropy_fwd_bwd, (leaf, targets), bytes_moved=moved
    )
    rows.append(copy_row(logits.numel() * logits.element_size()))
    return rows
