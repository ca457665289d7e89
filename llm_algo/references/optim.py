"""Optimizer checks shared by lessons: a training loop that can step through a closure, and the check that
`step(closure)` returns the closure's loss (torch.optim's contract)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from ..check import expect, expect_close


def optimizer_steps(optimizer, loss_fns: Iterable[Callable[[], torch.Tensor]], *, closure: bool = False) -> list:
    """One step per loss function: zero_grad, the loss, backward, step. With `closure`, the step is
    `optimizer.step(closure)` and what it returns is recorded; else the loss computed before the step. The losses."""
    losses = []
    for loss_of in loss_fns:

        def compute(loss_of=loss_of):
            optimizer.zero_grad()
            loss = loss_of()
            loss.backward()
            return loss

        if closure:
            losses.append(optimizer.step(compute))
        else:
            losses.append(compute())
            optimizer.step()
    return losses


def expect_closure_losses(got: list, want: list, *, input: str) -> None:
    """`step(closure)` returned, at every step, the loss its closure computed (compared with `want`, the losses of
    the reference optimizer on the same run)."""
    not_losses = [v for v in got if not isinstance(v, torch.Tensor)]
    expect(
        not not_losses,
        "step(closure) did not return the closure's loss",
        input=input,
        expected="the tensor the closure returned",
        got=repr(not_losses[:1]),
        hint="loss = closure() under torch.enable_grad(), before the update; return loss",
    )
    expect_close(
        torch.stack(got).detach(),
        torch.stack(want).detach(),
        input=input,
        what="losses returned by step(closure)",
        hint="step(closure) evaluates the closure once, before the update, and returns its loss",
    )
