"""Checks for p05.tiny_llm_from_scratch. Graded on outcomes, with references independent of the solutions: the
decoded streams against the source text; the tokenizer against one trained by the learner's p02 `train_bpe` on the
training documents alone; optimizer steps against `torch.optim.AdamW` + `LambdaLR` + `torch.nn.utils.clip_grad_norm_`
run in float64; the held-out loss against a window-by-window float64 loop; the schedule against its closed form;
training resumed from a checkpoint against the uninterrupted run, bit for bit; the validation loss of the CPU
configuration after its 60 steps against a stated target (a bigram model scores 2.06 nats per token); greedy decoding
against the learner's p02 `generate_greedy`; seeded samples against the exact tempered top-k distribution (chi-square,
false-alarm rate 1e-3); the samples of a trained model against a distinct-bigram target and a likelihood bound."""

import contextlib
import io
import math
import os
import sys
import tempfile
import types
import warnings
from collections import Counter

import torch
import torch.nn.functional as F

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_distribution,
    expect_tensor,
    expect_value_error,
    one_thread,
    reference_only,
    replacing,
)
from llm_algo.paths import repo_root

checks = Checks("p05.tiny_llm_from_scratch")

END_OF_TEXT = "<|endoftext|>"
CORPUS_PATH = repo_root() / "05_Projects" / "data" / "tiny_stories.txt"

# The CPU configuration, stated here rather than read from the learner's setup cell
CPU_MERGES, CPU_TRAIN_STORIES, CPU_VAL_STORIES = 100, 120, 24
CPU_MODEL = dict(
    dim=32,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    hidden_dim=96,
    vocab_size=357,
    norm_eps=1e-6,
    rope_theta=10000.0,
    tie_embeddings=False,
)
CPU_CONFIG = dict(
    steps=60,
    batch_size=16,
    context_length=32,
    peak_lr=2e-2,
    min_lr=2e-3,
    warmup_steps=6,
    weight_decay=0.1,
    betas=(0.9, 0.95),
    max_grad_norm=1.0,
    seed=0,
)
VAL_LOSS_TARGET = 1.85  # nats per token; the reference run reaches about 1.67, a bigram model 2.06
DISTINCT_2_TARGET = 0.35  # pooled distinct-bigram ratio of 8 samples of 48 tokens at temperature 1
SAMPLE_LOSS_BOUND = 2.8  # the trained model's own mean loss on its samples: uniform noise scores ln 357 = 5.88
FALSE_ALARM = 1e-3


def corpus_documents() -> list[str]:
    return CORPUS_PATH.read_text(encoding="utf-8").split(END_OF_TEXT)


def tiny_args(ex, vocab_size=40, n_layers=1, dim=16):
    return ex.ModelArgs(
        dim=dim,
        n_layers=n_layers,
        n_heads=2,
        n_kv_heads=1,
        head_dim=8,
        hidden_dim=2 * dim,
        vocab_size=vocab_size,
        norm_eps=1e-6,
        rope_theta=10000.0,
        tie_embeddings=False,
    )


def tiny_model(ex, vocab_size=40, n_layers=1, dim=16, sharpen=1.0, seed=0):
    torch.manual_seed(seed)
    model = ex.TinyLlama(tiny_args(ex, vocab_size, n_layers, dim))
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)  # random heads give flat distributions; sharpened ones look trained
    return model


def warmup_cosine(step: int, peak: float, floor: float, warmup: int, end: int) -> float:
    """The schedule's closed form, written independently of the learner's p02 code."""
    if step < warmup:
        return peak * step / warmup
    if step >= end:
        return floor
    return floor + (peak - floor) * (1 + math.cos(math.pi * (step - warmup) / (end - warmup))) / 2


# ------------------------------------------------------------------------------------------ prepare_corpus

PREPARE_HINT = (
    "split at END_OF_TEXT, hold out the LAST val_documents, learn the merges on the training documents joined by "
    "END_OF_TEXT, and append END_OF_TEXT's id after every document's ids"
)


@checks("prepare_corpus")
@one_thread()
def streams_decode_to_their_documents(ex):
    """each uint16 stream decodes to its split's documents, each followed by END_OF_TEXT"""
    documents = corpus_documents()
    for count, merges, held_out in ((8, 30, 3), (3, 0, 1), (5, 12, 4)):
        chosen = documents[count : 2 * count]  # stories from another part of the corpus than the setup's
        text = END_OF_TEXT.join(chosen)
        case = f"prepare_corpus({count} stories, num_merges={merges}, val_documents={held_out})"
        tokenizer, train_ids, val_ids = ex.prepare_corpus(text, merges, held_out)
        for name, stream, split in (
            ("train_ids", train_ids, chosen[:-held_out]),
            ("val_ids", val_ids, chosen[-held_out:]),
        ):
            expect_tensor(stream, shape=(stream.numel(),), dtype=torch.uint16, input=case, what=name, hint=PREPARE_HINT)
            decoded = tokenizer.decode(stream.tolist())
            want = END_OF_TEXT.join(split) + END_OF_TEXT
            expect(
                decoded == want,
                f"{name} does not decode to its {len(split)} documents, each followed by END_OF_TEXT",
                input=case,
                expected=repr(want[:90] + " ... " + want[-40:]),
                got=repr(decoded[:90] + " ... " + decoded[-40:]),
                hint=PREPARE_HINT,
            )
            end_id = tokenizer.special_ids[END_OF_TEXT]
            ends = int((stream.long() == end_id).sum())
            expect(
                ends == len(split) and int(stream[-1]) == end_id,
                f"{name} holds {ends} END_OF_TEXT ids for {len(split)} documents",
                input=case,
                expected=f"{len(split)}, the last one at the end of the stream",
                got=f"{ends}, last id {int(stream[-1])}",
                hint="append END_OF_TEXT's id after EVERY document, the last one included",
            )


@checks("prepare_corpus")
@one_thread()
def tokenizer_never_saw_the_validation_documents(ex):
    """the merges are those that your train_bpe learns from the training documents alone"""
    documents = corpus_documents()[30:36]
    strange = " ".join(["zyxw qzyxw"] * 40)  # frequent in the held-out documents only
    text = END_OF_TEXT.join(documents + [strange, strange + " zyxwzyxw"])
    case = "prepare_corpus(6 stories + 2 held-out documents full of 'zyxw', num_merges=40, val_documents=2)"
    tokenizer, _, val_ids = ex.prepare_corpus(text, 40, 2)
    with reference_only():
        want = ex.BPETokenizer(ex.train_bpe(END_OF_TEXT.join(documents), 40)).vocab
    leaked = sorted(token for token in tokenizer.vocab.values() if b"zy" in token or b"xw" in token)
    expect(
        not leaked,
        "the tokenizer learned merges from the validation documents",
        input=case,
        expected="no token containing b'zy' or b'xw' (those strings only occur in the held-out documents)",
        got=f"tokens {leaked[:6]}",
        hint="call train_bpe on the TRAINING documents only: the validation split must be new to the tokenizer",
    )
    expect(
        tokenizer.vocab == want,
        "the vocabulary differs from your train_bpe's on the training documents",
        input=case,
        expected=f"{len(want)} ids, the merges of train_bpe(END_OF_TEXT.join(training documents), 40)",
        got=f"{len(tokenizer.vocab)} ids, first differing id "
        f"{next((i for i in want if tokenizer.vocab.get(i) != want[i]), None)}",
        hint=PREPARE_HINT,
    )
    expect(
        val_ids.numel() > 2 * 40,
        "the validation stream is too short for two documents of 'zyxw' words",
        input=case,
        expected="the held-out documents encoded byte by byte (no merges for them)",
        got=f"{val_ids.numel()} tokens",
        hint=PREPARE_HINT,
    )


@checks("prepare_corpus")
@one_thread()
def prepare_refuses_bad_arguments(ex):
    """val_documents outside [1, documents - 1], negative merges, or a vocabulary beyond uint16 are refused"""
    text = END_OF_TEXT.join(["one story.", "two stories.", "three stories."])
    for merges, held_out, why in (
        (10, 0, "no validation document"),
        (10, 3, "no training document left"),
        (10, -1, "a negative split"),
        (-1, 1, "negative merges"),
        (2**16 - 256, 1, "256 + merges + 1 ids do not fit in uint16"),
    ):
        expect_value_error(
            lambda merges=merges, held_out=held_out: ex.prepare_corpus(text, merges, held_out),
            input=f"3 documents, num_merges={merges}, val_documents={held_out} ({why})",
            hint="validate before training the tokenizer: 1 <= val_documents < documents, 0 <= 256 + merges + 1 <= 2**16",
        )
    largest = 2**16 - 257  # ids 0 .. 65535: the last one is END_OF_TEXT's; train_bpe stops when no pair is left
    try:
        _, train_ids, _ = ex.prepare_corpus(text, largest, 1)
        accepted = f"accepted, {train_ids.numel()} training tokens"
    except ValueError as error:
        accepted = f"ValueError: {error}"
    expect(
        accepted.startswith("accepted"),
        "the largest vocabulary that fits in uint16 was refused",
        input=f"3 documents, num_merges={largest}, val_documents=1 (ids up to 256 + {largest} = 65535)",
        expected="accepted: 256 bytes + 65279 merges + END_OF_TEXT = 65536 ids fit in uint16",
        got=accepted,
        hint="refuse only when 256 + num_merges + 1 > 2**16",
    )


# ------------------------------------------------------------------------------------------ train_step

PEAK, FLOOR, WARMUP, END = 5e-2, 5e-3, 2, 6


def reference_optimizer(model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=PEAK, betas=(0.9, 0.95), weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, PEAK, FLOOR, WARMUP, END) / PEAK
    )
    return optimizer, scheduler


def reference_step(model, optimizer, scheduler, inputs, targets, max_norm):
    logits = model(inputs)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    optimizer.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.detach(), norm.detach()


def copies(ex, seed):
    """The learner's float32 model, a float32 baseline copy and a float64 oracle copy, same weights."""
    model = tiny_model(ex, seed=seed, n_layers=2)
    with reference_only():
        baseline = tiny_model(ex, seed=seed, n_layers=2)
        oracle = tiny_model(ex, seed=seed, n_layers=2).double()
    return model, baseline, oracle


@checks("train_step")
@one_thread()
def steps_match_torch_adamw_in_float64(ex):
    """3 steps (warmup from lr 0, clipping active) match AdamW + LambdaLR + clip_grad_norm_ run in float64"""
    for seed, max_norm in ((0, 0.3), (1, 50.0)):
        model, baseline, oracle = copies(ex, seed)
        optimizer, scheduler = reference_optimizer(model)
        runs = {"learner": [], "baseline": [], "oracle": []}
        with reference_only():
            base_opt, base_sched = reference_optimizer(baseline)
            oracle_opt, oracle_sched = reference_optimizer(oracle)
        for _step in range(3):
            inputs = torch.randint(0, 40, (3, 7))
            targets = torch.randint(0, 40, (3, 7))
            loss, norm = ex.train_step(model, optimizer, scheduler, inputs, targets, max_norm)
            runs["learner"].append((loss, norm))
            with reference_only():
                runs["baseline"].append(reference_step(baseline, base_opt, base_sched, inputs, targets, max_norm))
                runs["oracle"].append(reference_step(oracle, oracle_opt, oracle_sched, inputs, targets, max_norm))
        case = (
            f"2-layer TinyLlama (d=16, V=40), torch.optim.AdamW + LambdaLR warmup-cosine (lr 0 at step 0), 3 batches "
            f"(3, 7), max_grad_norm={max_norm}" + (" (clipping active)" if max_norm < 1 else " (no clipping)")
        )
        for index, what in ((0, "losses"), (1, "gradient norms before clipping")):
            got = torch.tensor([float(r[index]) for r in runs["learner"]], dtype=torch.float32)
            expect_close(
                got,
                torch.stack([r[index] for r in runs["oracle"]]),
                baseline=torch.stack([r[index] for r in runs["baseline"]]).float(),
                input=case,
                what=what,
                hint="loss = mean cross-entropy; zero_grad before backward (.grad accumulates); return the norm "
                "that clip_grad_norm returns (measured before clipping)",
            )
        for (name, got), want, base in zip(
            model.named_parameters(), oracle.parameters(), baseline.parameters(), strict=True
        ):
            expect_close(
                got.detach(),
                want.detach(),
                baseline=base.detach(),
                input=case,
                what=f"{name} after 3 steps",
                hint="order: zero_grad, backward, clip, optimizer.step(), scheduler.step() (the scheduler sets the NEXT "
                "step's lr; stepping it first skips the lr of step 0)",
            )


@checks("train_step")
@one_thread()
def returns_floats_and_advances_the_schedule_once(ex):
    """returns (loss, norm before clipping) as floats; one call = one schedule step; a tiny max_norm clips the update"""
    model = tiny_model(ex, seed=3)
    optimizer, scheduler = reference_optimizer(model)
    inputs, targets = torch.randint(0, 40, (2, 5)), torch.randint(0, 40, (2, 5))
    with reference_only():
        probe = tiny_model(ex, seed=3).double()
        want_loss = F.cross_entropy(probe(inputs).flatten(0, 1), targets.flatten())
        want_loss.backward()
        want_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in probe.parameters()]))
    result = ex.train_step(model, optimizer, scheduler, inputs, targets, 1e-3)
    case = "2 x 5 batch, max_grad_norm=1e-3, a fresh model and optimizer"
    expect(
        isinstance(result, tuple)
        and len(result) == 2
        and all(isinstance(v, float) and not isinstance(v, bool) for v in result),
        "train_step must return a tuple of two Python floats",
        input=case,
        expected="(loss, grad_norm) as floats (loss.item(), float(norm))",
        got=repr(result),
        hint="a tensor kept in a list of losses keeps its graph and the step's activations alive",
    )
    loss, norm = result
    half = tiny_model(ex, seed=9, sharpen=3.0).to(torch.bfloat16)
    half_opt, half_sched = reference_optimizer(half)
    with reference_only(), torch.no_grad():
        want_half = F.cross_entropy(half(inputs).flatten(0, 1).double(), targets.flatten()).item()
    got_half, _ = ex.train_step(half, half_opt, half_sched, inputs, targets, 1.0)
    expect_close(
        torch.tensor(got_half, dtype=torch.float32),
        torch.tensor(want_half, dtype=torch.float64),
        dtype=torch.float32,
        input="a bfloat16 TinyLlama, 2 x 5 batch: its loss, to float32 precision",
        what="loss",
        hint="upcast the logits: F.cross_entropy(logits.flatten(0, 1).float(), ...); bf16 keeps 3 significant digits",
    )
    expect_close(
        torch.tensor([loss, norm]), torch.stack([want_loss, want_norm]).detach(), input=case, what="(loss, norm)"
    )
    for calls in range(1, 5):
        want_lr = warmup_cosine(calls, PEAK, FLOOR, WARMUP, END)
        got_lr = optimizer.param_groups[0]["lr"]
        expect(
            scheduler.last_epoch == calls and math.isclose(got_lr, want_lr, rel_tol=1e-9, abs_tol=1e-12),
            f"after {calls} call(s) of train_step the schedule is not at step {calls}",
            input=case,
            expected=f"scheduler.last_epoch == {calls}, lr {want_lr:.6g}",
            got=f"last_epoch {scheduler.last_epoch}, lr {got_lr:.6g}",
            hint="call scheduler.step() exactly once per train_step, after optimizer.step()",
        )
        if calls < 4:
            before = [p.detach().clone() for p in model.parameters()]
            ex.train_step(model, optimizer, scheduler, inputs, targets, 1e-3)
            moved = max(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before, strict=True))
            # with gradients clipped to norm 1e-3 the AdamW update is still about lr per coordinate: check the
            # clip through the second moment instead: v = (1 - beta2) * sum of clipped g^2 stays tiny
            v_total = sum(float(optimizer.state[p]["exp_avg_sq"].sum()) for p in model.parameters())
            expect(
                v_total <= (1 - 0.95) * (calls + 1) * 1e-6 * 1.01 and moved < 1.0,
                "the gradients the optimizer saw were not clipped to max_grad_norm",
                input=case + f", step {calls + 1}",
                expected=f"sum of AdamW's exp_avg_sq <= (1 - beta2) * steps * max_norm^2 = "
                f"{(1 - 0.95) * (calls + 1) * 1e-6:.3g}",
                got=f"{v_total:.3g}",
                hint="clip after backward and BEFORE optimizer.step()",
            )


@checks("train_step")
@one_thread()
def train_step_refuses_bad_input(ex):
    """mismatched or non-2-D batches and max_grad_norm <= 0 are refused before any update"""
    model = tiny_model(ex, seed=4)
    optimizer, scheduler = reference_optimizer(model)
    before = [p.detach().clone() for p in model.parameters()]
    good = torch.randint(0, 40, (2, 5))
    for inputs, targets, max_norm, why in (
        (good, torch.randint(0, 40, (2, 4)), 1.0, "targets (2, 4) for inputs (2, 5)"),
        (torch.randint(0, 40, (2, 6)), torch.randint(0, 40, (3, 4)), 1.0, "inputs (2, 6), targets (3, 4): 12 each"),
        (good[0], good[0], 1.0, "1-D inputs and targets"),
        (good, good, 0.0, "max_grad_norm = 0"),
        (good, good, -1.0, "max_grad_norm < 0"),
    ):
        expect_value_error(
            lambda inputs=inputs, targets=targets, max_norm=max_norm: ex.train_step(
                model, optimizer, scheduler, inputs, targets, max_norm
            ),
            input=why,
            hint="check the shapes and max_grad_norm first, and raise ValueError",
        )
    changed = [n for (n, p), b in zip(model.named_parameters(), before, strict=True) if not torch.equal(p.detach(), b)]
    with_grad = [n for n, p in model.named_parameters() if p.grad is not None]
    expect(
        not changed and not with_grad and scheduler.last_epoch == 0,
        "a refused call still ran the model, changed the weights or moved the schedule",
        input="the five refused calls above",
        expected="weights, gradients (None) and schedule untouched",
        got=f"changed: {changed[:3]}, gradients on {with_grad[:3]}, schedule at step {scheduler.last_epoch}",
        hint="validate before the forward pass",
    )


# ------------------------------------------------------------------------------------------ evaluate


def loop_loss(model, tokens: torch.Tensor, length: int) -> torch.Tensor:
    """Float64 loop spec: window by window, token by token."""
    total, count = torch.zeros((), dtype=torch.float64), 0
    windows = (tokens.numel() - 1) // length
    with torch.no_grad():
        for i in range(windows):
            window = tokens[i * length : i * length + length + 1].long()
            logprobs = torch.log_softmax(model(window[None, :-1])[0].double(), dim=-1)  # (T, V)
            for t in range(length):
                total -= logprobs[t, window[t + 1]]
                count += 1
    return total / count


@checks("evaluate")
@one_thread()
def evaluate_matches_a_window_by_window_loop(ex):
    """mean loss over the (N-1)//T windows, last batch smaller, uint16 and int64 streams, equals a float64 loop"""
    for n_tokens, length, batch, dtype in (
        (103, 8, 5, torch.int64),
        (50, 7, 64, torch.uint16),
        (9, 8, 1, torch.int32),
        (61, 4, 4, torch.uint16),
        (64, 8, 3, torch.int64),
        (6, 1, 2, torch.int64),
        (45, 4, 5, "bf16 model"),
    ):
        model = tiny_model(ex, sharpen=4.0, seed=n_tokens)
        if dtype == "bf16 model":
            model, dtype = model.to(torch.bfloat16), torch.int64
        tokens = torch.randint(0, 40, (n_tokens,)).to(dtype)
        case = f"evaluate(tokens {describe(tokens=tokens)}, context_length={length}, batch_size={batch})" + (
            ", a bfloat16 model" if next(model.parameters()).dtype == torch.bfloat16 else ""
        )
        got = ex.evaluate(model, tokens, length, batch)
        expect(
            isinstance(got, float),
            "evaluate must return a Python float",
            input=case,
            expected="a float",
            got=repr(got),
            hint="sum the losses with .item() and divide",
        )
        with reference_only():
            want = loop_loss(model, tokens, length)
            baseline = F.cross_entropy(
                model(tokens[: (n_tokens - 1) // length * length].long().view(-1, length)).flatten(0, 1).float(),
                tokens[1 : (n_tokens - 1) // length * length + 1].long(),
            ).detach()
        expect_close(
            torch.tensor(got, dtype=torch.float32),
            want,
            baseline=baseline,
            input=case,
            what="validation loss",
            hint="k = (N - 1) // T windows tokens[iT : iT + T] with targets shifted by one; weigh every token the same "
            "(sum, then divide by k * T: a mean of batch means over-weighs a smaller last batch); losses in float32",
        )


@checks("evaluate")
@one_thread()
def zero_head_scores_log_vocab_and_mode_is_restored(ex):
    """a model with a zero head scores ln V exactly; the train/eval mode comes back; no gradients are kept"""
    model = tiny_model(ex, vocab_size=37, seed=7)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit 0: the uniform distribution over 37 ids
    tokens = torch.randint(0, 37, (70,))
    for mode in (True, False):
        model.train(mode)
        got = ex.evaluate(model, tokens, 6, 4)
        case = f"zero head, V=37, 70 tokens, T=6, batch 4, model.training={mode}"
        expect(
            math.isclose(got, math.log(37), rel_tol=1e-5),
            "a model that gives every id the same logit must score ln V",
            input=case,
            expected=f"ln 37 = {math.log(37):.6f}",
            got=f"{got!r}",
            hint="mean cross-entropy over all predicted tokens",
        )
        expect(
            model.training == mode,
            "evaluate changed the model's mode",
            input=case,
            expected=f"model.training == {mode} after the call",
            got=f"model.training == {model.training}",
            hint="remember model.training, call model.eval(), and restore it with model.train(was_training)",
        )
    expect(
        all(p.grad is None for p in model.parameters()),
        "evaluate left gradients on the parameters",
        input="zero head, V=37",
        expected="no .grad (torch.no_grad, no backward)",
        got="some .grad set",
        hint="evaluation never calls backward",
    )


@checks("evaluate")
@one_thread()
def evaluate_refuses_bad_input(ex):
    """a stream shorter than one window, a 2-D stream, context_length or batch_size < 1 are refused"""
    model = tiny_model(ex, seed=8)
    for tokens, length, batch, why in (
        (torch.randint(0, 40, (8,)), 8, 2, "N = 8 tokens, T = 8: no window with a target"),
        (torch.randint(0, 40, (2, 20)), 4, 2, "a 2-D stream"),
        (torch.randint(0, 40, (20,)), 0, 2, "context_length = 0"),
        (torch.randint(0, 40, (20,)), 4, 0, "batch_size = 0"),
    ):
        expect_value_error(
            lambda tokens=tokens, length=length, batch=batch: ex.evaluate(model, tokens, length, batch),
            input=why,
            hint="refuse with ValueError: 1-D, N >= T + 1, T >= 1, batch_size >= 1",
        )


# ------------------------------------------------------------------------------------------ TrainingRun

# Kept for the whole process: a notebook's check cell loads this module afresh each time, and the tokenized corpus
# and the trained model are the expensive parts (keys: the learner's components, so a changed one is not reused)
_PROCESS_CACHE = sys.modules.setdefault("_p05_tiny_llm_from_scratch_cache", types.ModuleType("cache"))
_CPU_STREAMS: dict = _PROCESS_CACHE.__dict__.setdefault("cpu_streams", {})
_TRAINED: dict = _PROCESS_CACHE.__dict__.setdefault("trained", {})


def cpu_streams(ex):
    """(tokenizer, train_ids, val_ids) of the CPU configuration, by the learner's p02 tokenizer, encoded as one
    string per split (special tokens in the text): a different route from prepare_corpus's."""
    key = (ex.train_bpe, ex.BPETokenizer)
    if key not in _CPU_STREAMS:
        documents = corpus_documents()[: CPU_TRAIN_STORIES + CPU_VAL_STORIES]
        train_text = END_OF_TEXT.join(documents[:CPU_TRAIN_STORIES]) + END_OF_TEXT
        val_text = END_OF_TEXT.join(documents[CPU_TRAIN_STORIES:]) + END_OF_TEXT
        with reference_only():
            tokenizer = ex.BPETokenizer(ex.train_bpe(train_text, CPU_MERGES))
            train_ids = torch.tensor(tokenizer.encode(train_text), dtype=torch.int64)
            val_ids = torch.tensor(tokenizer.encode(val_text), dtype=torch.int64)
        _CPU_STREAMS[key] = (tokenizer, train_ids, val_ids)
    return _CPU_STREAMS[key]


def held_out_loss(model, val_ids, length=32) -> float:
    windows = (val_ids.numel() - 1) // length
    inputs = val_ids[: windows * length].view(windows, length)
    targets = val_ids[1 : windows * length + 1].view(windows, length)
    with torch.no_grad():
        logits = model(inputs).double()
    return float(F.cross_entropy(logits.flatten(0, 1), targets.flatten()))


def small_config(ex, **changes):
    values = dict(
        steps=8,
        batch_size=3,
        context_length=6,
        peak_lr=1e-2,
        min_lr=1e-3,
        warmup_steps=3,
        weight_decay=0.1,
        betas=(0.9, 0.95),
        max_grad_norm=1.0,
        seed=5,
    )
    values.update(changes)
    return ex.TrainConfig(**values)


@checks("TrainingRun")
@one_thread()
def run_is_built_from_your_components_and_seeded(ex):
    """your TinyLlama and AdamW, no decay on 1-D parameters, the warmup-cosine schedule ending at config.steps, seeded"""
    args, config = ex.ModelArgs(**CPU_MODEL), ex.TrainConfig(**CPU_CONFIG)
    case = "TrainingRun(ModelArgs(CPU configuration), TrainConfig(CPU configuration))"
    run = ex.TrainingRun(args, config)
    expect(
        isinstance(run.model, ex.TinyLlama) and isinstance(run.optimizer, ex.AdamW) and run.step == 0,
        "the run must hold your TinyLlama and your AdamW, at step 0",
        input=case,
        expected="run.model a TinyLlama, run.optimizer an AdamW (from the setup cell), run.step == 0",
        got=f"{type(run.model).__name__}, {type(run.optimizer).__name__}, step {getattr(run, 'step', None)!r}",
        hint="build them from the names the setup cell took with lesson.use",
    )
    decay_of = {id(p): group["weight_decay"] for group in run.optimizer.param_groups for p in group["params"]}
    wrong = [
        name
        for name, p in run.model.named_parameters()
        if decay_of.get(id(p)) != (config.weight_decay if p.dim() >= 2 else 0.0)
    ]
    betas = {tuple(group["betas"]) for group in run.optimizer.param_groups}
    expect(
        not wrong and betas == {tuple(config.betas)},
        "the optimizer's parameter groups are not the weight-decay split",
        input=case,
        expected=f"weight_decay {config.weight_decay} on matrices and embeddings, 0 on norm gains; betas {config.betas}",
        got=f"wrong decay on {wrong[:4]}; betas {sorted(betas)}",
        hint="AdamW(weight_decay_param_groups(model, config.weight_decay), lr=config.peak_lr, betas=config.betas)",
    )
    twin = ex.TrainingRun(args, config)
    other = ex.TrainingRun(args, ex.TrainConfig(**{**CPU_CONFIG, "seed": 1}))
    same = all(torch.equal(a, b) for a, b in zip(run.model.parameters(), twin.model.parameters(), strict=True))
    differs = any(not torch.equal(a, b) for a, b in zip(run.model.parameters(), other.model.parameters(), strict=True))
    expect(
        same and differs,
        "the initial weights are not a function of config.seed",
        input=case + ", built twice with seed 0 and once with seed 1",
        expected="identical weights for the same seed, different ones for another seed",
        got=f"same seed identical: {same}; other seed different: {differs}",
        hint="torch.manual_seed(config.seed) right before TinyLlama(model_args)",
    )
    fresh = [torch.Generator().manual_seed(seed + 1).get_state() for seed in (0, 1)]
    expect(
        torch.equal(run.generator.get_state(), fresh[0]) and torch.equal(other.generator.get_state(), fresh[1]),
        "the sampler's generator is not a fresh torch.Generator seeded with config.seed + 1",
        input=case + " and with seed 1",
        expected="run.generator.get_state() == torch.Generator().manual_seed(config.seed + 1).get_state()",
        got="another state",
        hint="self.generator = torch.Generator().manual_seed(config.seed + 1): the data order is part of the recipe",
    )
    got, want = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "lr_scheduler.step() before optimizer.step()": on purpose, to read the lr
        for step in range(config.steps + 3):
            got.append(run.optimizer.param_groups[0]["lr"])
            want.append(warmup_cosine(step, config.peak_lr, config.min_lr, config.warmup_steps, config.steps))
            run.scheduler.step()
    bad = [
        s for s, (g, w) in enumerate(zip(got, want, strict=True)) if not math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-12)
    ]
    expect(
        not bad,
        "the learning rate does not follow warmup-cosine ending at config.steps",
        input=case + f", scheduler stepped {config.steps + 2} times",
        expected=f"lr at steps {bad[:3]}: {[round(want[s], 6) for s in bad[:3]]}",
        got=f"{[round(got[s], 6) for s in bad[:3]]}",
        hint="make_lambda_lr(optimizer, partial(warmup_cosine_lr, peak_lr, min_lr, warmup_steps, "
        "decay_end=config.steps), config.peak_lr)",
    )


def train_with_resume(ex, args, config, stream, folder, stop_at, every):
    """Train to stop_at with checkpoints every `every` steps; resume from the file in objects built after the global
    RNG was disturbed; finish. Returns (losses before + after, the resumed run, the step it resumed at)."""
    path = os.path.join(folder, f"ckpt_{stop_at}_{every}.pt")
    first = ex.TrainingRun(args, config)
    losses = first.train(stream, stop_at, checkpoint_path=path, checkpoint_every=every)
    torch.manual_seed(1234)
    torch.rand(17)
    resumed = ex.TrainingRun.resume(path, args, config)
    resumed_at = resumed.step
    return losses[:resumed_at] + resumed.train(stream, config.steps), resumed, resumed_at


@checks("TrainingRun")
@one_thread()
def resume_is_bit_exact(ex):
    """8 steps straight equal 4 + resume + 4, and 3 (last checkpoint at 2) + resume + 6, bit for bit"""
    args = tiny_args(ex)
    config = small_config(ex)
    stream = torch.randint(0, 40, (400,)).to(torch.uint16)
    straight = ex.TrainingRun(args, config)
    shapes = []
    forward = straight.model.forward

    def recording_forward(input_ids, *rest, **kwargs):
        shapes.append(tuple(input_ids.shape))
        return forward(input_ids, *rest, **kwargs)

    straight.model.forward = recording_forward
    straight_losses = straight.train(stream, config.steps)
    del straight.model.forward
    expect(
        set(shapes) == {(config.batch_size, config.context_length)},
        "the model was not trained on (batch_size, context_length) batches",
        input=f"batch_size={config.batch_size}, context_length={config.context_length}",
        expected=f"every batch {(config.batch_size, config.context_length)}",
        got=f"batches {sorted(set(shapes))}",
        hint="sample_batch(tokens, config.batch_size, config.context_length, device, generator)",
    )
    expect(
        len(straight_losses) == config.steps and straight.step == config.steps,
        "train(tokens, until_step) must run the steps self.step .. until_step - 1",
        input="a fresh run, train(tokens, 8)",
        expected="8 losses, run.step == 8",
        got=f"{len(straight_losses)} losses, run.step == {straight.step}",
        hint="loop over range(self.step, until_step) and count each step",
    )
    with tempfile.TemporaryDirectory() as folder:
        for stop_at, every, want_step in ((4, 2, 4), (3, 2, 2)):
            losses, resumed, resumed_at = train_with_resume(ex, args, config, stream, folder, stop_at, every)
            case = (
                f"1-layer TinyLlama, 8-step warmup-cosine run, checkpoint_every={every}, stopped after {stop_at} steps, "
                "resumed into a run built after the global RNG was disturbed, trained to step 8"
            )
            expect(
                resumed_at == want_step,
                "the resumed run does not start at the checkpoint's step",
                input=case,
                expected=f"run.step == {want_step} after resume (the steps done when the checkpoint was written)",
                got=f"run.step == {resumed_at}",
                hint="save after counting the step (self.step += 1, then save when self.step % c == 0); "
                "resume sets run.step to load_checkpoint's return value",
            )
            gaps = [
                name
                for (name, a), b in zip(resumed.model.named_parameters(), straight.model.parameters(), strict=True)
                if not torch.equal(a, b)
            ]
            expect(
                losses == straight_losses and not gaps,
                "training resumed from the checkpoint differs from the uninterrupted run",
                input=case,
                expected=f"losses {[round(x, 5) for x in straight_losses]} and bit-identical weights",
                got=f"losses {[round(x, 5) for x in losses]}; weights differ in {gaps[:3]}",
                hint="the run's generator must be created once (in __init__) and saved/restored with the checkpoint; "
                "the optimizer, the scheduler and the step too",
            )


@checks("TrainingRun")
@one_thread()
def train_refuses_bad_arguments(ex):
    """until_step outside [step, config.steps], checkpoint_every < 0, or checkpoints without a path are refused"""
    run = ex.TrainingRun(tiny_args(ex), small_config(ex))
    stream = torch.randint(0, 40, (100,))
    run.train(stream, 2)
    nothing = run.train(stream, 2)
    expect(
        nothing == [] and run.step == 2,
        "train(tokens, until_step=run.step) must be an empty piece of training, not an error",
        input="a run at step 2, train(tokens, 2)",
        expected="[] and run.step == 2",
        got=f"{nothing!r}, run.step == {run.step}",
        hint="accept self.step <= until_step <= config.steps",
    )
    for kwargs, why in (
        (dict(until_step=9), "until_step 9 > config.steps 8"),
        (dict(until_step=1), "until_step 1 < run.step 2"),
        (dict(until_step=4, checkpoint_every=-1), "checkpoint_every = -1"),
        (dict(until_step=4, checkpoint_every=1), "checkpoint_every = 1 without a checkpoint_path"),
    ):
        here = os.getcwd()
        with tempfile.TemporaryDirectory() as folder:
            os.chdir(folder)  # a wrong solution may write a file named after checkpoint_path=None: not in the repo
            try:
                expect_value_error(
                    lambda kwargs=kwargs: run.train(stream, **kwargs),
                    input=f"a run at step 2 of 8, train(tokens, {', '.join(f'{k}={v}' for k, v in kwargs.items())}) "
                    f"({why})",
                    hint="validate the arguments before the first step",
                )
            finally:
                os.chdir(here)


@checks("TrainingRun")
def model_is_built_on_the_device_given(ex):
    """TrainingRun(..., device="meta") (a device without storage: shapes only) puts every parameter and buffer there"""
    run = ex.TrainingRun(tiny_args(ex), small_config(ex), device="meta")
    tensors = [("parameter " + n, t) for n, t in run.model.named_parameters()]
    tensors += [("buffer " + n, t) for n, t in run.model.named_buffers()]
    elsewhere = [f"{name} on {tensor.device}" for name, tensor in tensors if tensor.device.type != "meta"]
    expect(
        tensors and not elsewhere and torch.device(run.device).type == "meta",
        "the model is not on the device the run was given",
        input='TrainingRun(ModelArgs(tiny), TrainConfig(small), device="meta")',
        expected="run.device == torch.device('meta') and every parameter and buffer of run.model on meta",
        got=f"run.device {getattr(run, 'device', None)!r}; {len(elsewhere)} elsewhere, e.g. {elsewhere[:2]}",
        hint="self.device = torch.device(device); TinyLlama(model_args).to(self.device)",
    )


class BarRecorder:
    """The notebook's `tqdm` while a check runs: whether each bar it made is shown (not disabled)."""

    def __init__(self, original):
        self.original, self.shown = original, []

    def __call__(self, *args, **kwargs):
        bar = self.original(*args, **kwargs)
        self.shown.append(not getattr(bar, "disable", False))
        return bar


def train_watching_bars(ex, stream, steps, **kwargs):
    """A fresh small run trained for `steps`: (losses, final weights, whether a progress bar was shown: by the
    notebook's tqdm, or as tqdm's text on stderr)."""
    original = ex._namespace.get("tqdm")
    if original is None:
        from tqdm.auto import tqdm as original
    run = ex.TrainingRun(tiny_args(ex), small_config(ex))
    written = io.StringIO()
    with replacing(ex, "tqdm", BarRecorder(original)) as recorder, contextlib.redirect_stderr(written):
        losses = run.train(stream, steps, **kwargs)
    text = written.getvalue()
    shown = any(recorder.shown) or "it/s" in text or "s/it" in text
    return losses, [p.detach().clone() for p in run.model.parameters()], shown


@checks("TrainingRun")
@one_thread()
def progress_shows_a_bar_and_changes_nothing_else(ex):
    """train(..., progress=True) shows a bar (progress=False none) and gives the same losses and weights, bit for bit"""
    stream = torch.randint(0, 40, (200,)).to(torch.uint16)
    quiet_losses, quiet_weights, quiet_bar = train_watching_bars(ex, stream, 3)
    loud_losses, loud_weights, loud_bar = train_watching_bars(ex, stream, 3, progress=True)
    case = "two fresh runs (same seed), train(tokens, 3) and train(tokens, 3, progress=True)"
    expect(
        loud_bar and not quiet_bar,
        "progress does not decide whether a bar is shown",
        input=case,
        expected="a tqdm bar with progress=True, none with progress=False",
        got=f"bar with progress=True: {loud_bar}; with progress=False: {quiet_bar}",
        hint="tqdm(range(self.step, until_step), disable=not progress) with the setup's tqdm",
    )
    same = all(torch.equal(a, b) for a, b in zip(quiet_weights, loud_weights, strict=True))
    expect(
        loud_losses == quiet_losses and same,
        "the progress bar changed the training",
        input=case,
        expected=f"the same losses {[round(v, 5) for v in quiet_losses]} and weights",
        got=f"losses {[round(v, 5) for v in loud_losses]}; weights equal: {same}",
        hint="the bar only wraps the range of steps: nothing else may depend on progress",
    )


@checks("TrainingRun")
@one_thread()
def cpu_configuration_beats_the_validation_target(ex):
    """the CPU configuration trained for its 60 steps scores below 1.85 nats/token on the held-out stories"""
    tokenizer, train_ids, val_ids = cpu_streams(ex)
    run = ex.TrainingRun(ex.ModelArgs(**CPU_MODEL), ex.TrainConfig(**CPU_CONFIG))
    losses = run.train(train_ids.to(torch.uint16), CPU_CONFIG["steps"])
    with reference_only():
        loss = held_out_loss(run.model, val_ids)
    case = (
        f"CPU configuration: {CPU_MERGES} merges on stories 0-{CPU_TRAIN_STORIES - 1}, held-out stories "
        f"{CPU_TRAIN_STORIES}-{CPU_TRAIN_STORIES + CPU_VAL_STORIES - 1}, 2-layer d=32 TinyLlama, 60 steps of 16 x 32"
    )
    expect(
        len(losses) == CPU_CONFIG["steps"] and all(math.isfinite(x) for x in losses),
        "training did not produce one finite loss per step",
        input=case,
        expected="60 finite losses",
        got=f"{len(losses)} losses, first {[round(x, 3) for x in losses[:3]]}, last {[round(x, 3) for x in losses[-3:]]}",
        hint="train_step must pass its checks first",
    )
    expect(
        loss < VAL_LOSS_TARGET,
        "the trained model misses the validation target",
        input=case,
        expected=f"held-out loss < {VAL_LOSS_TARGET} nats/token (the reference run: about 1.67; a bigram model: 2.06)",
        got=f"{loss:.3f} nats/token (training losses: first {losses[0]:.3f}, last {losses[-1]:.3f})",
        hint="check the schedule (warmup, decay_end = config.steps), the weight-decay groups and train_step's order",
    )
    _TRAINED[(ex.TinyLlama, ex.train_bpe, ex.BPETokenizer)] = run.model  # the sampling check reuses it


# ------------------------------------------------------------------------------------------ distinct_ngram_ratio


def ngram_spec(sequences, n):
    grams = Counter()
    for sequence in sequences:
        ids = [int(x) for x in sequence]
        for i in range(len(ids) - n + 1):
            grams[tuple(ids[i : i + n])] += 1
    return len(grams) / sum(grams.values())


@checks("distinct_ngram_ratio")
def ratios_by_hand(ex):
    """[1,2,1,2,1]: 2/5, 2/4, 2/3 for n = 1, 2, 3; n-grams never span two sequences; short ones are skipped"""
    for sequences, n, want in (
        ([[1, 2, 1, 2, 1]], 1, 2 / 5),
        ([[1, 2, 1, 2, 1]], 2, 2 / 4),
        ([[1, 2, 1, 2, 1]], 3, 2 / 3),
        ([[1, 2, 3], [2, 3, 4]], 2, 3 / 4),
        ([[5], [1, 2], [7, 7, 7, 7]], 2, 2 / 4),
        ([[9, 9, 9, 9, 9, 9]], 5, 1 / 2),
    ):
        got = ex.distinct_ngram_ratio(sequences, n)
        expect(
            isinstance(got, float) and math.isclose(got, want),
            "wrong distinct n-gram ratio",
            input=f"distinct_ngram_ratio({sequences}, n={n})",
            expected=f"{want:.4f}",
            got=repr(got),
            hint="the n-grams of each sequence separately (i from 0 to len - n), pooled; distinct / total",
        )


@checks("distinct_ngram_ratio")
def tensors_count_by_value(ex):
    """rows of a (B, L) tensor and lists of 1-D tensors give the same ratio as lists of ints"""
    for rows, length, vocab, n in ((4, 30, 5, 2), (1, 12, 3, 3), (6, 8, 50, 1), (3, 40, 4, 4)):
        tokens = torch.randint(0, vocab, (rows, length))
        want = ngram_spec(tokens.tolist(), n)
        for form, sequences in (("a (B, L) tensor", tokens), ("a list of 1-D tensors", list(tokens))):
            got = ex.distinct_ngram_ratio(sequences, n)
            expect(
                isinstance(got, float) and math.isclose(got, want),
                "the ratio of tensor input differs from the ratio of the same ids as ints",
                input=f"{form} of {rows} x {length} ids below {vocab}, n={n}",
                expected=f"{want:.4f}",
                got=repr(got),
                hint="tuples of 0-d tensors hash by identity: convert the ids with int() before building tuples",
            )


@checks("distinct_ngram_ratio")
def distinct_refuses_bad_input(ex):
    """n < 1, or no sequence with n tokens, is refused"""
    for sequences, n, why in (
        ([[1, 2, 3]], 0, "n = 0"),
        ([[1, 2], [3]], 3, "no sequence of 3 tokens"),
        ([], 1, "none"),
    ):
        expect_value_error(
            lambda sequences=sequences, n=n: ex.distinct_ngram_ratio(sequences, n),
            input=f"distinct_ngram_ratio({sequences}, n={n}) ({why})",
            hint="raise ValueError rather than divide by zero",
        )


# ------------------------------------------------------------------------------------------ generate


@checks("generate")
@one_thread()
def greedy_equals_your_generate_greedy(ex):
    """temperature 0, and top_k=1 sampling, give your generate_greedy's tokens exactly"""
    model = tiny_model(ex, vocab_size=48, n_layers=2, sharpen=3.0, seed=11)
    for batch, length, new in ((3, 5, 10), (1, 9, 1), (2, 4, 0)):
        prompts = torch.randint(0, 48, (batch, length))
        with reference_only():
            want = ex.generate_greedy(model, prompts, max_new_tokens=new) if new else prompts
        for kwargs in (
            dict(temperature=0.0),
            dict(temperature=1.0, top_k=1, generator=torch.Generator().manual_seed(0)),
        ):
            got = ex.generate(model, prompts, new, **kwargs)
            case = f"prompts {describe(prompts=prompts)}, max_new_tokens={new}, {kwargs}"
            expect_tensor(got, shape=(batch, length + new), dtype=torch.int64, input=case, what="tokens")
            expect(
                torch.equal(got, want),
                "the tokens differ from generate_greedy's",
                input=case,
                expected=str(want[:, length:].tolist()),
                got=str(got[:, length:].tolist()),
                hint="prefill the prompt into fresh caches, then feed ONE token per step through the same caches, and "
                "pick from the LAST column's logits",
            )


@checks("generate")
@one_thread()
def one_forward_pass_per_new_token(ex):
    """a prefill of the prompts, then one single-token forward pass per further new token, nothing more"""
    model = tiny_model(ex, vocab_size=48, n_layers=2, sharpen=3.0, seed=15)
    calls = []
    forward = model.forward

    def counting_forward(input_ids, *rest, **kwargs):
        calls.append(tuple(input_ids.shape))
        return forward(input_ids, *rest, **kwargs)

    model.forward = counting_forward
    for new in (6, 1):
        calls.clear()
        ex.generate(model, torch.randint(0, 48, (2, 5)), new, temperature=0.0)
        want = [(2, 5)] + [(2, 1)] * (new - 1)
        expect(
            calls == want,
            "generate runs more (or longer) forward passes than decoding needs",
            input=f"prompts (2, 5), max_new_tokens={new}, greedy",
            expected=f"{len(want)} calls: the prefill (2, 5), then (2, 1) per step; the last token needs no forward",
            got=f"{len(calls)} calls with input shapes {calls[:8]}",
            hint="feed only the new token through the caches, and stop after choosing the last token",
        )


@checks("generate")
@one_thread()
def first_token_follows_the_tempered_top_k_distribution(ex):
    """3,000 seeded first tokens follow softmax(logits / T) over the top k (chi-square, false alarm 1e-3)"""
    model = tiny_model(ex, vocab_size=16, n_layers=1, sharpen=2.0, seed=12)
    prompt = torch.randint(0, 16, (1, 6))
    with reference_only(), torch.no_grad():
        logits = model(prompt)[0, -1].double()  # (V,)
    for temperature, top_k in ((0.7, 5), (1.6, None)):
        scores = logits / temperature
        if top_k:
            scores = scores.masked_fill(scores < scores.topk(top_k).values[-1], float("-inf"))
        probs = scores.softmax(-1)
        out = ex.generate(
            model,
            prompt.repeat(3000, 1),
            1,
            temperature=temperature,
            top_k=top_k,
            generator=torch.Generator().manual_seed(3),
        )
        counts = torch.bincount(out[:, -1], minlength=16).double()
        expect_distribution(
            counts,
            probs,
            input=f"one prompt x 3000 rows, V=16, temperature={temperature}, top_k={top_k}",
            what="first generated tokens",
            hint="Temperature(temperature) then TopK(top_k) as processors of your sample_next_token",
            false_alarm=FALSE_ALARM,
        )


@checks("generate")
@one_thread()
def samples_are_seeded_and_follow_the_full_sequence(ex):
    """the same generator seed gives the same sample; every sampled token is in the top k of a full forward pass"""
    model = tiny_model(ex, vocab_size=48, n_layers=2, sharpen=2.0, seed=13)
    prompts = torch.randint(0, 48, (3, 4))
    case = f"prompts {describe(prompts=prompts)}, 12 new tokens, temperature 1.0, top_k 3"
    first = ex.generate(model, prompts, 12, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(5))
    torch.rand(11)  # the global RNG moves; the sample must not
    second = ex.generate(model, prompts, 12, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(5))
    expect_tensor(first, shape=(3, 16), dtype=torch.int64, input=case, what="tokens")
    expect(
        torch.equal(first, second) and torch.equal(first[:, :4], prompts),
        "two calls with equally seeded generators gave different samples (or the prompt was changed)",
        input=case,
        expected=str(first[:, 4:].tolist()),
        got=str(second[:, 4:].tolist()),
        hint="pass the caller's generator to sample_next_token: the global RNG must not be used",
    )
    with reference_only(), torch.no_grad():
        full = model(first)  # (3, 16, V): every position recomputed from scratch
    allowed = full[:, 3:-1].topk(3, dim=-1).indices  # (3, 12, 3): the top 3 at each choice
    inside = (allowed == first[:, 4:, None]).any(-1)
    expect(
        bool(inside.all()),
        "a sampled token is outside the top 3 of the full-sequence logits",
        input=case,
        expected="every new token among the 3 largest logits of a full forward pass at its position",
        got=f"outside at (row, step) {inside.logical_not().nonzero().tolist()[:4]}",
        hint="decoding steps must use the caches (the model must see the whole history) and the last column's logits",
    )


@checks("generate")
@one_thread()
def generate_refuses_bad_input(ex):
    """a 1-D prompt, a negative temperature or a negative max_new_tokens is refused"""
    model = tiny_model(ex, seed=14)
    prompt = torch.randint(0, 40, (2, 3))
    for args, kwargs, why in (
        ((prompt[0], 4), {}, "1-D input_ids"),
        ((prompt, 4), dict(temperature=-0.5), "temperature < 0"),
        ((prompt, -1), {}, "max_new_tokens < 0"),
    ):
        expect_value_error(
            lambda args=args, kwargs=kwargs: ex.generate(model, *args, **kwargs),
            input=why,
            hint="validate input_ids.dim() == 2, temperature >= 0, max_new_tokens >= 0",
        )


def trained_model(ex):
    """The CPU configuration's model after its 60 steps: the one the TrainingRun check trained, or one trained here
    with torch.optim.AdamW and the same recipe when that check did not run or did not pass."""
    key = (ex.TinyLlama, ex.train_bpe, ex.BPETokenizer)
    if key not in _TRAINED:
        _, train_ids, _ = cpu_streams(ex)
        c = CPU_CONFIG
        with reference_only():
            torch.manual_seed(c["seed"])
            model = ex.TinyLlama(ex.ModelArgs(**CPU_MODEL))
            decay = [p for p in model.parameters() if p.dim() >= 2]
            rest = [p for p in model.parameters() if p.dim() < 2]
            optimizer = torch.optim.AdamW(
                [{"params": decay, "weight_decay": c["weight_decay"]}, {"params": rest, "weight_decay": 0.0}],
                lr=c["peak_lr"],
                betas=c["betas"],
            )
            schedule = torch.optim.lr_scheduler.LambdaLR(
                optimizer,
                lambda s: warmup_cosine(s, c["peak_lr"], c["min_lr"], c["warmup_steps"], c["steps"]) / c["peak_lr"],
            )
            generator = torch.Generator().manual_seed(c["seed"] + 1)
            length = c["context_length"]
            for _ in range(c["steps"]):
                starts = torch.randint(len(train_ids) - length, (c["batch_size"],), generator=generator)
                windows = train_ids[starts[:, None] + torch.arange(length + 1)]
                reference_step(model, optimizer, schedule, windows[:, :-1], windows[:, 1:], c["max_grad_norm"])
        _TRAINED[key] = model
    return _TRAINED[key]


@checks("generate")
@one_thread()
def trained_model_samples_are_diverse_not_noise(ex):
    """8 samples of 48 tokens from the trained CPU model: distinct-2 ratio > 0.35 and the model's own loss < 2.8"""
    tokenizer, _, _ = cpu_streams(ex)
    model = trained_model(ex)
    prompt = torch.tensor([tokenizer.encode("Once upon a time,")] * 8)
    out = ex.generate(model, prompt, 48, temperature=1.0, generator=torch.Generator().manual_seed(0))
    case = "8 x 'Once upon a time,', 48 new tokens, temperature 1.0, the CPU configuration trained 60 steps"
    expect_tensor(out, shape=(8, prompt.shape[1] + 48), dtype=torch.int64, input=case, what="tokens")
    new = out[:, prompt.shape[1] :]
    with reference_only(), torch.no_grad():
        diversity = ngram_spec(new.tolist(), 2)
        logits = model(out)[:, prompt.shape[1] - 1 : -1].double()
        surprise = float(F.cross_entropy(logits.flatten(0, 1), new.flatten()))
    sample = tokenizer.decode(out[0].tolist())
    expect(
        diversity > DISTINCT_2_TARGET,
        "the samples are degenerate (they repeat the same bigrams)",
        input=case,
        expected=f"distinct-2 ratio > {DISTINCT_2_TARGET} (greedy decoding gets 0.07)",
        got=f"{diversity:.3f}; first sample {sample[:160]!r}",
        hint="sample (temperature > 0) instead of taking the argmax, with the generator, one row per prompt",
    )
    expect(
        surprise < SAMPLE_LOSS_BOUND,
        "the samples are noise: the model itself finds them unlikely",
        input=case,
        expected=f"the model's mean loss on its own samples < {SAMPLE_LOSS_BOUND} nats/token (uniform: 5.88)",
        got=f"{surprise:.3f}; first sample {sample[:160]!r}",
        hint="decode through the caches with the right positions, and sample from softmax(logits / temperature)",
    )
