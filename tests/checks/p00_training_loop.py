"""Checks for p00.training_loop. References: a training loop written here with the same sampling rule and the same
builtins (float64, `F.cross_entropy`, `clip_grad_norm_`, `torch.optim`), the closed form of one clipped SGD step,
bit-identical reruns (`torch.equal`), a tiny batch that must be overfitted, and an uninterrupted run that a resumed
one must match bit for bit (weights, AdamW state, the next numbers of all three generators), read back with
`torch.load(weights_only=True)`."""

import os
import random
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, expect, expect_close, expect_value_error, one_thread

checks = Checks("p00.training_loop")

VOCAB = 13


class DropoutLM(nn.Module):
    """Embedding, dropout 0.3, a two-layer head: dropout makes the RNG state part of the result."""

    def __init__(self, vocab_size=VOCAB, dim=12, dropout=0.3):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.dropout = nn.Dropout(dropout)
        self.hidden = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, ids):
        return self.head(torch.tanh(self.hidden(self.dropout(self.embed(ids)))))


def reference_train(model, optimizer, data, num_steps, batch_size, max_grad_norm):
    """The loop of section 1, written out: draw the rows, then forward, loss, zero_grad, backward, clip, step."""
    model.train()
    losses = []
    for _ in range(num_steps):
        index = torch.randint(0, data.shape[0], (batch_size,))
        batch = data[index]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        losses.append(loss.item())
    return losses


def fresh(seed, dtype=torch.float64, lr=1e-2):
    torch.manual_seed(seed)
    model = DropoutLM().to(dtype)
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


# ------------------------------------------------------------------------------------------ train_loop


@checks("train_loop")
@one_thread()
def matches_reference_loop(ex):
    """8 steps of AdamW on a dropout model (left in eval mode before the call) equal the reference loop (float64)"""
    data = torch.randint(0, VOCAB, (40, 7))
    for batch_size, max_grad_norm in ((4, 1.0), (1, 0.05)):
        mine, mine_opt = fresh(3)
        ref, ref_opt = fresh(3)
        mine.eval()  # an evaluation ran before: train_steps must switch dropout back on
        torch.manual_seed(11)
        losses = ex.train_steps(mine, mine_opt, data, 8, batch_size, max_grad_norm=max_grad_norm)
        torch.manual_seed(11)
        expected = reference_train(ref, ref_opt, data, 8, batch_size, max_grad_norm)
        label = (
            f"DropoutLM float64, AdamW, data (40, 7), 8 steps, batch_size={batch_size}, max_grad_norm={max_grad_norm}"
        )
        expect(
            isinstance(losses, list) and len(losses) == 8 and all(type(v) is float for v in losses),
            "train_steps must return one Python float per step",
            input=label,
            got=repr(losses)[:120],
            hint="losses.append(loss.item())",
        )
        expect_close(
            torch.tensor(losses, dtype=torch.float64),
            torch.tensor(expected, dtype=torch.float64),
            input=label + ": the losses",
            hint="model.train(); rows = data[torch.randint(0, N, (B,))] before the forward; y = rows[:, 1:]",
        )
        for (name, p), q in zip(mine.named_parameters(), ref.parameters(), strict=True):
            expect_close(
                p.detach(),
                q.detach(),
                input=f"{label}: {name} after training",
                hint="zero_grad, backward, clip_grad_norm_, step: in this order, once per step",
            )


@checks("train_loop")
@one_thread()
def reruns_are_bit_identical(ex):
    """seed_everything(s) then training, twice (the second with progress=True: a progress bar changes nothing):
    identical losses and weights; Python and NumPy draws repeat too"""
    data = torch.randint(0, VOCAB, (30, 6))
    runs = []
    for progress in (False, True):
        ex.seed_everything(2024)
        draws = (random.random(), float(np.random.rand()), float(torch.rand(())))
        model = DropoutLM().float()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = ex.train_steps(model, optimizer, data, 5, 3, progress=progress)
        runs.append((draws, losses, [p.detach().clone() for p in model.parameters()]))
    (d1, l1, w1), (d2, l2, w2) = runs
    label = "seed_everything(2024), then DropoutLM float32 + AdamW, 5 steps; done twice (progress=False, then True)"
    expect(
        d1 == d2,
        "random.random(), np.random.rand() or torch.rand() differ after the same seed",
        input=label,
        expected=str(d1),
        got=str(d2),
        hint="seed random, numpy.random and torch",
    )
    expect(
        l1 == l2 and all(torch.equal(a, b) for a, b in zip(w1, w2, strict=True)),
        "two runs from the same seed are not bit-identical",
        input=label,
        expected=str(l1),
        got=str(l2),
        hint="draw every random number from the seeded global generators, in the same order",
    )
    ex.seed_everything(2025)
    expect(
        (random.random(), float(np.random.rand()), float(torch.rand(()))) != d1,
        "another seed gives the same draws",
        input="seed_everything(2025)",
        hint="pass the seed through",
    )


@checks("train_loop")
@one_thread()
def one_clipped_sgd_step(ex):
    """one SGD step (lr 1) with max_grad_norm=1e-3: the weights move by exactly 1e-3 in global norm"""
    data = torch.randint(0, VOCAB, (10, 5))
    model, _ = fresh(5)
    model.dropout.p = 0.0
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    ex.train_steps(model, optimizer, data, 1, 4, max_grad_norm=1e-3)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    moved = float((after - before).norm())
    expect(
        abs(moved - 1e-3) < 1e-7,
        "the clipped step has the wrong size",
        input="SGD lr=1, max_grad_norm=1e-3",
        expected="||delta w|| = 0.001 (the gradient norm is far above 1e-3)",
        got=f"{moved:.3g}",
        hint="clip_grad_norm_(model.parameters(), max_grad_norm) after backward, before step",
    )


@checks("train_loop")
@one_thread()
def overfits_a_tiny_batch(ex):
    """two fixed rows, 150 AdamW steps: the loss falls below 0.05 (each target has one possible next token)"""
    rows = torch.tensor([[1, 5, 2, 7, 3, 9], [2, 7, 3, 9, 4, 11]])
    torch.manual_seed(0)
    model = DropoutLM(dropout=0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-2)
    losses = ex.train_steps(model, optimizer, rows, 150, 2)
    expect(
        losses[-1] < 0.05 and losses[-1] < losses[0],
        "the loss did not go to ~0 on two memorisable rows",
        input="2 rows of 5 inputs, AdamW lr 5e-2, 150 steps",
        expected="final loss < 0.05",
        got=f"first {losses[0]:.3f}, last {losses[-1]:.3f}",
        hint="targets are the inputs shifted by one (rows[:, 1:]); zero the gradients every step",
    )


@checks("train_loop")
def bad_arguments_refused(ex):
    """num_steps=-1, batch_size=0, max_grad_norm=0: ValueError; num_steps=0 does nothing"""
    model, optimizer = fresh(0)
    data = torch.randint(0, VOCAB, (5, 4))
    for kwargs in (
        dict(num_steps=-1, batch_size=2),
        dict(num_steps=2, batch_size=0),
        dict(num_steps=2, batch_size=2, max_grad_norm=0.0),
    ):
        expect_value_error(
            lambda k=kwargs: ex.train_steps(model, optimizer, data, **k),
            str(kwargs),
            "validate the arguments before the loop",
        )
    before = [p.detach().clone() for p in model.parameters()]
    losses = ex.train_steps(model, optimizer, data, 0, 2)
    expect(
        losses == [] and all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)),
        "num_steps=0 must be accepted and do nothing",
        input="num_steps=0",
        expected="[] and unchanged weights",
        got=repr(losses),
        hint="0 steps is a valid request (e.g. evaluating a checkpoint); refuse only negative values",
    )


# ------------------------------------------------------------------------------------------ checkpoint


def all_rng_draws():
    return random.random(), float(np.random.rand()), float(torch.rand(()))


@checks("checkpoint")
@one_thread()
def resume_is_bit_identical(ex):
    """6 steps straight == 3 steps, save, load into a new model/optimizer (other seed), 3 steps: same bits"""
    data = torch.randint(0, VOCAB, (32, 6))
    for dtype in (torch.float32, torch.float64):
        model, optimizer = fresh(7, dtype)
        torch.manual_seed(99)
        random.seed(5)
        np.random.seed(5)
        reference_train(model, optimizer, data, 6, 4, 0.5)
        expected_draws = all_rng_draws()

        first, first_opt = fresh(7, dtype)
        torch.manual_seed(99)
        random.seed(5)
        np.random.seed(5)
        reference_train(first, first_opt, data, 3, 4, 0.5)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "ckpt.pt")
            ex.save_checkpoint(path, first, first_opt, 3)
            second, second_opt = fresh(123, dtype)  # another init, other generator states
            random.seed(77)
            np.random.seed(77)
            step = ex.load_checkpoint(path, second, second_opt)
        reference_train(second, second_opt, data, 3, 4, 0.5)
        label = f"DropoutLM {dtype}, AdamW, 3 steps + save/load + 3 steps against 6 steps"
        expect(step == 3, "load_checkpoint must return the saved step", input=label, expected="3", got=repr(step))
        for (name, p), q in zip(second.named_parameters(), model.parameters(), strict=True):
            expect(
                torch.equal(p, q),
                f"{name} differs from the uninterrupted run",
                input=label,
                expected="bit-identical",
                got=f"max diff {float((p - q).abs().max()):.3g}",
                hint="save and restore the optimizer state and torch's RNG state (dropout, batch sampling)",
            )
        draws = all_rng_draws()
        expect(
            draws == expected_draws,
            "the generators continue differently after the resume",
            input=label,
            expected=str(expected_draws),
            got=str(draws),
            hint="save and restore torch.get_rng_state(), random.getstate() and np.random.get_state()",
        )


@checks("checkpoint")
@one_thread()
def file_is_safe_and_complete(ex):
    """the file loads with weights_only=True and holds the model's and AdamW's state (moments and step)"""
    model, optimizer = fresh(1)
    reference_train(model, optimizer, torch.randint(0, VOCAB, (8, 5)), 2, 2, 1.0)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ckpt.pt")
        ex.save_checkpoint(path, model, optimizer, 2)
        try:
            state = torch.load(path, weights_only=True)
            error = ""
        except Exception as exc:  # an UnpicklingError names the object that is not allowed
            state, error = None, f"{type(exc).__name__}: {str(exc)[:160]}"
        expect(
            state is not None,
            "the checkpoint does not load with torch.load(weights_only=True)",
            input="save_checkpoint after 2 AdamW steps",
            got=error,
            hint="store tensors, dicts, tuples, ints, floats and strings only (NumPy's key array as a tensor)",
        )
        other, other_opt = fresh(2)
        ex.load_checkpoint(path, other, other_opt)
    label = "DropoutLM float64 after 2 AdamW steps, loaded into another instance"
    for (name, p), q in zip(other.named_parameters(), model.parameters(), strict=True):
        expect(torch.equal(p, q), f"{name} not restored", input=label, hint="model.load_state_dict")
    for p, q in zip(other.parameters(), model.parameters(), strict=True):
        got, want = other_opt.state.get(p, {}), optimizer.state[q]
        same = set(got) == set(want) and all(
            torch.equal(torch.as_tensor(got[k]), torch.as_tensor(want[k])) for k in want
        )
        expect(
            same,
            "AdamW's state (exp_avg, exp_avg_sq, step) was not restored",
            input=label,
            expected=str(sorted(want)),
            got=str(sorted(got)),
            hint="optimizer.load_state_dict",
        )


@checks("checkpoint")
def wrong_files_refused(ex):
    """a bare state_dict, or step=-1 on save: ValueError, the model left unchanged; step 0 is valid"""
    model, optimizer = fresh(4)
    before = [p.detach().clone() for p in model.parameters()]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "weights_only.pt")
        other, _ = fresh(8)
        torch.save(other.state_dict(), path)
        expect_value_error(
            lambda: ex.load_checkpoint(path, model, optimizer),
            "a file with model.state_dict() only",
            "check the checkpoint's keys before loading anything",
        )
        initial = os.path.join(folder, "step0.pt")
        ex.save_checkpoint(initial, model, optimizer, 0)  # the state before training is a valid checkpoint
        expect(
            ex.load_checkpoint(initial, model, optimizer) == 0,
            "a checkpoint at step 0 must round-trip",
            input="save_checkpoint(..., step=0)",
            hint="refuse only negative steps",
        )
        expect_value_error(
            lambda: ex.save_checkpoint(os.path.join(folder, "x.pt"), model, optimizer, -1),
            "step=-1",
            "refuse a negative step",
        )
    expect(
        all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)),
        "a refused file changed the model",
        input="a bare state_dict of another model",
        hint="validate first, then load_state_dict",
    )
