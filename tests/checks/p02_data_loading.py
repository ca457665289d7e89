"""Checks for p02.data_loading. References: counts of the starts over thousands of draws from a stream of distinct
ids (every start drawn, a chi-square bound on uniformity); a float64 loop spec of packing written token by token;
PyTorch's scaled_dot_product_attention and a Hugging Face LlamaDecoderLayer (tiny random config, float64) run on each
document separately, which a packed row must reproduce; and training resumed from the learner's checkpoint compared
with uninterrupted training (AdamW, a LambdaLR warmup, dropout, a sampler generator), bit for bit."""

import os
import tempfile

import torch
import torch.nn.functional as F

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    expect_tensor,
    expect_value_error,
    one_thread,
    reference_only,
)
from llm_algo.references.hf import tiny_llama_config
from llm_algo.references.llama import llama_layer, rotary_tables

checks = Checks("p02.data_loading")

SAMPLE_HINT = (
    "starts = randint(N - T, (B,)) with the generator; inputs = tokens[s : s + T], targets = tokens[s + 1 : s + T + 1]"
)


def distinct_stream(num_tokens: int, dtype=torch.int64) -> tuple[torch.Tensor, dict[int, int]]:
    """A stream of distinct ids (so a window's first token tells its start) and the id -> position table."""
    stream = (torch.randperm(num_tokens) + 1000).to(dtype)
    return stream, {int(token): position for position, token in enumerate(stream.tolist())}


def find_starts(inputs: torch.Tensor, where: dict[int, int]) -> list[int]:
    return [where.get(int(token), -1) for token in inputs[:, 0].tolist()]


# ------------------------------------------------------------------------------------------ sample_batch


@checks("sample_batch")
def windows_are_shifted_slices(ex):
    """every row is a window tokens[s : s + T] of the stream and its target the same window shifted by one"""
    for num_tokens, batch, length, dtype in ((50, 4, 8, torch.int64), (9, 1, 8, torch.int32), (33, 7, 1, torch.int16)):
        stream, where = distinct_stream(num_tokens, dtype)
        inputs, targets = ex.sample_batch(stream, batch, length)
        case = f"sample_batch(tokens {describe(tokens=stream)}, batch_size={batch}, context_length={length})"
        expect_tensor(inputs, shape=(batch, length), dtype=torch.int64, input=case, what="inputs", hint=SAMPLE_HINT)
        expect_tensor(targets, shape=(batch, length), dtype=torch.int64, input=case, what="targets", hint=SAMPLE_HINT)
        for row, start in enumerate(find_starts(inputs, where)):
            want_inputs = stream[start : start + length].long() if start >= 0 else None
            want_targets = stream[start + 1 : start + length + 1].long() if start >= 0 else None
            ok_inputs = start >= 0 and torch.equal(inputs[row], want_inputs)
            expect(
                ok_inputs,
                f"row {row} of the inputs is not a window of the stream",
                input=case,
                expected=f"tokens[s : s + {length}] for some start s",
                got=str(inputs[row].tolist()),
                hint=SAMPLE_HINT,
            )
            expect(
                len(want_targets) == length and torch.equal(targets[row], want_targets),
                f"row {row}: the targets are not the inputs' window shifted by one",
                input=case,
                expected=f"tokens[{start + 1} : {start + length + 1}] = {want_targets.tolist()}",
                got=str(targets[row].tolist()),
                hint="targets[b, t] must be the token after inputs[b, t]: tokens[s + 1 : s + T + 1]",
            )


@checks("sample_batch")
def starts_cover_every_position_uniformly(ex):
    """over 9,600 draws every start 0 .. N - T - 1 appears, the last one included, at a uniform rate"""
    num_tokens, length = 40, 7
    stream, where = distinct_stream(num_tokens)
    generator = torch.Generator().manual_seed(int(torch.randint(1 << 30, ())))
    counts = torch.zeros(num_tokens, dtype=torch.float64)
    for _ in range(150):
        inputs, _ = ex.sample_batch(stream, 64, length, generator=generator)
        for start in find_starts(inputs, where):
            counts[start] += 1
    num_starts = num_tokens - length
    case = f"150 batches of 64 windows, N={num_tokens}, T={length}: {num_starts} valid starts 0..{num_starts - 1}"
    never = [s for s in range(num_starts) if counts[s] == 0]
    expect(
        not never,
        f"starts {never} were never drawn",
        input=case,
        expected=f"every start 0..{num_starts - 1} about {9600 / num_starts:.0f} times",
        got=f"counts {counts[:num_starts].long().tolist()}",
        hint="the last valid start is N - T - 1: torch.randint(N - T, ...) (its upper bound is exclusive)",
    )
    expected_count = counts.sum() / num_starts
    chi_square = float(((counts[:num_starts] - expected_count) ** 2 / expected_count).sum())
    expect(
        chi_square < 100.0,  # 32 degrees of freedom: mean 32, sd 8; 100 is beyond p = 1e-8
        "the starts are far from uniform",
        input=case,
        expected="a chi-square statistic near 32 (32 degrees of freedom), below 100",
        got=f"chi-square {chi_square:.1f}, counts {counts[:num_starts].long().tolist()}",
        hint="draw every start with the same probability: torch.randint(N - T, (B,), generator=generator)",
    )


@checks("sample_batch")
def draws_from_the_given_generator(ex):
    """the same seed gives the same batch, other seeds others, and the global RNG is left untouched"""
    stream = torch.randint(0, 50_000, (5000,), dtype=torch.int32)
    case = f"sample_batch(tokens {describe(tokens=stream)}, 6, 32, generator=torch.Generator().manual_seed(...))"
    global_state = torch.get_rng_state()
    first = ex.sample_batch(stream, 6, 32, generator=torch.Generator().manual_seed(7))
    after = torch.get_rng_state()
    again = ex.sample_batch(stream, 6, 32, generator=torch.Generator().manual_seed(7))
    other = ex.sample_batch(stream, 6, 32, generator=torch.Generator().manual_seed(8))
    expect(
        torch.equal(first[0], again[0]) and torch.equal(first[1], again[1]),
        "two generators with the same seed gave different batches",
        input=case + ", seed 7 twice",
        expected="identical batches",
        got="different batches",
        hint="draw the starts with torch.randint(..., generator=generator)",
    )
    expect(
        not torch.equal(first[0], other[0]),
        "seeds 7 and 8 gave the same batch",
        input=case + ", seeds 7 and 8",
        expected="different starts",
        got="the same starts",
        hint="the starts must come from the generator you are given",
    )
    expect(
        torch.equal(global_state, after),
        "sample_batch changed the global RNG although a generator was given",
        input=case,
        expected="torch.get_rng_state() unchanged",
        got="a different global RNG state",
        hint="pass generator=generator to torch.randint; the global RNG belongs to dropout and initialisation",
    )


@checks("sample_batch")
def device_and_dtype_contract(ex):
    """int64 batches on the requested device ("cpu", torch.device("cpu"), "meta") from streams of any integer dtype"""
    for dtype in (torch.uint8, torch.int16, torch.int32, torch.int64):
        stream = torch.randint(0, 200, (64,)).to(dtype)
        for device in ("cpu", torch.device("cpu"), "meta"):  # every machine has a meta device (shapes, no data)
            inputs, targets = ex.sample_batch(stream, 3, 5, device=device)
            case = f"sample_batch(tokens {describe(tokens=stream)}, 3, 5, device={device!r})"
            for name, value in (("inputs", inputs), ("targets", targets)):
                expect_tensor(
                    value,
                    shape=(3, 5),
                    dtype=torch.int64,
                    device=torch.device(device),
                    input=case,
                    what=name,
                    hint="cast each window with .to(torch.int64) (nn.Embedding and cross_entropy want long indices) and move "
                    "the batch to torch.device(device)",
                )


@checks("sample_batch")
def refuses_bad_input(ex):
    """an unknown or absent device, a float or 2-D stream, a stream too short, an empty batch: ValueError"""
    stream = torch.randint(0, 100, (30,))
    absent_cuda = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU: absent on every machine
    cases = [
        ((stream, 2, 4), {"device": "gpu"}, "device='gpu' (not a device type)"),
        ((stream, 2, 4), {"device": absent_cuda}, f"device={absent_cuda!r} (no such GPU here)"),
        ((stream.float(), 2, 4), {}, "a float stream"),
        ((stream.view(5, 6), 2, 4), {}, "a 2-D stream"),
        ((stream[:4], 2, 4), {}, "N = 4 tokens, T = 4 (no window of T + 1)"),
        ((stream, 0, 4), {}, "batch_size = 0"),
        ((stream, 2, 0), {}, "context_length = 0"),
    ]
    if not torch.backends.mps.is_available():  # every Linux machine, with or without CUDA
        cases.append(((stream, 2, 4), {"device": "mps"}, "device='mps' (no Apple GPU here)"))
    for args, kwargs, why in cases:
        expect_value_error(
            lambda args=args, kwargs=kwargs: ex.sample_batch(*args, **kwargs),
            input=f"sample_batch with {why}",
            hint="validate first; torch.device(...) raises RuntimeError for an unknown type: turn it into a ValueError,"
            " and refuse a CUDA index >= torch.cuda.device_count()",
        )


# ------------------------------------------------------------------------------------------ pack_documents

PACK_HINT = (
    "per document d: input_ids d + [EOS]; labels d[1:] + [EOS, -100]; positions 0..len(d); document id k for all "
    "len(d) + 1 tokens"
)


def packing_spec(documents: list[list[int]], eos_id: int) -> dict[str, list[int]]:
    """The loop spec, token by token."""
    out = {"input_ids": [], "labels": [], "position_ids": [], "document_ids": []}
    for k, document in enumerate(documents):
        with_eos = list(document) + [eos_id]
        for position, token in enumerate(with_eos):
            out["input_ids"].append(token)
            out["labels"].append(with_eos[position + 1] if position + 1 < len(with_eos) else -100)
            out["position_ids"].append(position)
            out["document_ids"].append(k)
    return out


def expect_packed(got, want: dict[str, list[int]], case: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 4,
        "pack_documents must return (input_ids, labels, position_ids, document_ids)",
        input=case,
        expected="a tuple of 4 tensors",
        got=type(got).__name__,
    )
    for name, value in zip(want, got, strict=True):
        expect_tensor(value, shape=(len(want[name]),), dtype=torch.int64, input=case, what=name, hint=PACK_HINT)
        expect(
            value.tolist() == want[name],
            f"{name} is wrong",
            input=case,
            expected=str(want[name]),
            got=str(value.tolist()),
            hint=PACK_HINT,
        )


@checks("pack_documents")
def packs_three_documents_by_hand(ex):
    """[[5, 6, 7], [8], [9, 10]] with EOS 0, worked out by hand"""
    want = {
        "input_ids": [5, 6, 7, 0, 8, 0, 9, 10, 0],
        "labels": [6, 7, 0, -100, 0, -100, 10, 0, -100],
        "position_ids": [0, 1, 2, 3, 0, 1, 0, 1, 2],
        "document_ids": [0, 0, 0, 0, 1, 1, 2, 2, 2],
    }
    expect_packed(ex.pack_documents([[5, 6, 7], [8], [9, 10]], 0), want, "pack_documents([[5, 6, 7], [8], [9, 10]], 0)")


@checks("pack_documents")
def packs_random_documents_like_the_spec(ex):
    """random documents (lists and int32 tensors, 1 to 6 of them, lengths 1 to 9) against a token-by-token spec"""
    for trial in range(6):
        eos_id = int(torch.randint(0, 2, ())) * 100  # EOS 0 or 100; tokens in 1..99
        lengths = torch.randint(1, 10, (int(torch.randint(1, 7, ())),)).tolist()
        documents = [torch.randint(1, 100, (n,)).tolist() for n in lengths]
        given = documents if trial % 2 == 0 else [torch.tensor(d, dtype=torch.int32) for d in documents]
        kind = "lists" if trial % 2 == 0 else "int32 tensors"
        case = f"pack_documents({len(documents)} documents as {kind}, lengths {lengths}, eos_id={eos_id})"
        expect_packed(ex.pack_documents(given, eos_id), packing_spec(documents, eos_id), case)


def reference_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """(L, L) bool by the definition, a double loop."""
    ids = document_ids.tolist()
    return torch.tensor([[ids[i] == ids[j] and j <= i for j in range(len(ids))] for i in range(len(ids))])


def llama_block_rows(layer, config, hidden: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor):
    """A Hugging Face LlamaDecoderLayer on one row (1, L, d) with an explicit (L, L) boolean mask, float64."""
    blocked = torch.finfo(torch.float32).min  # eager softmax runs in float32 (see references.llama.additive_mask)
    additive = torch.zeros(allowed.shape, dtype=hidden.dtype).masked_fill(~allowed, blocked)[None, None]
    with torch.no_grad():
        out = layer(
            hidden,
            attention_mask=additive,
            position_ids=position_ids[None],
            position_embeddings=rotary_tables(config, hidden, position_ids[None]),
        )
    return (out[0] if isinstance(out, tuple) else out)[0]  # (L, d)


@checks("pack_documents")
@one_thread()
def packed_llama_layer_equals_separate_documents(ex):
    """a Hugging Face LlamaDecoderLayer on your packed row (your positions) equals the layer on each document alone"""
    with reference_only():
        config = tiny_llama_config()
        layer = llama_layer("block", config).double()
        embedding = torch.randn(config.vocab_size, config.hidden_size, dtype=torch.float64)
    lengths = [4, 1, 6, 2]
    documents = [torch.randint(1, config.vocab_size, (n,)).tolist() for n in lengths]
    input_ids, _, position_ids, document_ids = ex.pack_documents(documents, 0)
    case = f"4 documents of lengths {lengths} packed with EOS 0 (L = {sum(lengths) + 4}), tiny Llama layer, float64"
    expect_tensor(position_ids, shape=(sum(lengths) + 4,), dtype=torch.int64, input=case, what="position_ids")
    with reference_only():
        packed = llama_block_rows(
            layer, config, embedding[input_ids][None], position_ids, reference_mask(document_ids)
        )  # (L, d)
        spec = {key: torch.tensor(value) for key, value in packing_spec(documents, 0).items()}
        baseline = llama_block_rows(
            layer,
            config,
            embedding[spec["input_ids"]][None],
            spec["position_ids"],
            reference_mask(spec["document_ids"]),
        )
        separate = []
        for document in documents:
            ids = torch.tensor(document + [0])
            separate.append(
                llama_block_rows(
                    layer,
                    config,
                    embedding[ids][None],
                    torch.arange(len(ids)),
                    torch.ones(len(ids), len(ids)).tril().bool(),
                )
            )
    expect_close(
        packed,
        torch.cat(separate),
        input=case,
        baseline=baseline,  # the same packed row with the spec's positions: HF rounds RoPE and softmax in float32
        dtype=torch.float32,
        what="layer output on the packed row",
        hint="position_ids must restart at 0 with every document (RoPE then rotates each document as if alone); "
        "document_ids must keep the EOS with the document it ends",
    )


@checks("pack_documents")
def refuses_bad_documents(ex):
    """no documents, an empty document, a document that contains the EOS id: ValueError"""
    cases = [
        ([], 0, "no documents"),
        ([[1, 2], []], 0, "an empty second document"),
        ([[3, 4], [5, 0, 6]], 0, "document 1 contains eos_id 0"),
        ([torch.tensor([7, 99])], 99, "a tensor document containing eos_id 99"),
    ]
    for documents, eos_id, why in cases:
        expect_value_error(
            lambda documents=documents, eos_id=eos_id: ex.pack_documents(documents, eos_id),
            input=f"pack_documents({documents}, eos_id={eos_id}) ({why})",
            hint="validate every document: non-empty and free of the EOS id (it would blur the boundaries)",
        )


# ------------------------------------------------------------------------------------------ packed_causal_mask

MASK_HINT = "allowed[..., i, j] = (ids[..., i] == ids[..., j]) & (j <= i): same-document blocks AND the lower triangle"


def runs_of_ids(lengths: list[int], dtype=torch.int64) -> torch.Tensor:
    labels = torch.randperm(50)[: len(lengths)]  # arbitrary, unsorted document labels
    return torch.cat([torch.full((n,), int(label)) for n, label in zip(lengths, labels, strict=True)]).to(dtype)


@checks("packed_causal_mask")
def mask_by_hand(ex):
    """ids [0, 0, 1, 1, 1]: two lower-triangular blocks of 2 and 3, worked out by hand"""
    want = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]], dtype=torch.bool
    )
    ids = torch.tensor([0, 0, 1, 1, 1])
    got = ex.packed_causal_mask(ids)
    expect_tensor(got, shape=(5, 5), dtype=torch.bool, input="document_ids [0, 0, 1, 1, 1]", hint=MASK_HINT)
    expect(
        torch.equal(got, want),
        "the mask is wrong",
        input="document_ids [0, 0, 1, 1, 1]",
        expected=str(want.int().tolist()),
        got=str(got.int().tolist()),
        hint=MASK_HINT + "; the diagonal is allowed (a token sees itself)",
    )


@checks("packed_causal_mask")
def mask_matches_the_definition(ex):
    """random batches of runs of (unsorted) document labels, int32 and int64, 1-D and 2-D, against a double loop"""
    for batch, dtype in ((1, torch.int64), (3, torch.int32), (None, torch.int64)):
        rows = []
        for _ in range(batch or 1):
            lengths = torch.randint(1, 6, (int(torch.randint(1, 5, ())),)).tolist()
            rows.append(runs_of_ids(lengths))
        length = max(len(r) for r in rows)
        rows = [torch.cat([r, torch.full((length - len(r),), 99)]) for r in rows]  # a trailing "padding document"
        ids = torch.stack(rows).to(dtype) if batch else rows[0].to(dtype)
        want = torch.stack([reference_mask(r) for r in rows]) if batch else reference_mask(rows[0])
        got = ex.packed_causal_mask(ids)
        case = f"document_ids {describe(ids=ids)} = {ids.tolist()}"
        expect_tensor(got, shape=tuple(want.shape), dtype=torch.bool, input=case, hint=MASK_HINT)
        wrong = (got != want).nonzero().tolist()
        expect(
            not wrong,
            f"{len(wrong)} entries of the mask are wrong",
            input=case,
            expected="the block-diagonal causal mask",
            got=f"wrong at (…, i, j) = {wrong[:6]}",
            hint=MASK_HINT,
        )


@checks("packed_causal_mask")
def sdpa_on_packed_rows_equals_separate_documents(ex):
    """scaled_dot_product_attention with your mask on packed rows equals causal attention on each document alone"""
    heads, dim = 2, 8
    layouts = [[3, 1, 5], [2, 7]]
    length = max(sum(lay) for lay in layouts)
    ids = torch.stack([torch.cat([runs_of_ids(lay), torch.full((length - sum(lay),), 77)]) for lay in layouts])
    q, k, v = (torch.randn(len(layouts), heads, length, dim, dtype=torch.float64) for _ in range(3))
    mask = ex.packed_causal_mask(ids)
    case = f"q, k, v {describe(q=q)}; documents of lengths {layouts} (padded to {length} as one more document)"
    expect_tensor(mask, shape=(len(layouts), length, length), dtype=torch.bool, input=case, what="mask")
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])  # (B, H, L, D)
    want = torch.empty_like(got)
    for b, lay in enumerate(layouts):
        start = 0
        for n in [*lay, length - sum(lay)]:
            if n:
                part = slice(start, start + n)
                want[b, :, part] = F.scaled_dot_product_attention(
                    q[b, :, part], k[b, :, part], v[b, :, part], is_causal=True
                )
            start += n
    expect(
        not bool(got.isnan().any()),
        "attention with your mask has NaN rows",
        input=case,
        expected="finite outputs",
        got=f"{int(got.isnan().any(-1).sum())} NaN rows",
        hint="a row with every key masked: keep the diagonal (j <= i, not j < i)",
    )
    expect_close(got, want, input=case, what="attention output", hint=MASK_HINT)


@checks("packed_causal_mask")
def mask_refuses_bad_input(ex):
    """float ids, a scalar, a 3-D tensor: ValueError"""
    for ids, why in (
        (torch.tensor([0.0, 0.0, 1.0]), "float document ids"),
        (torch.tensor(3), "a 0-D tensor"),
        (torch.zeros(2, 2, 4, dtype=torch.long), "a 3-D tensor"),
    ):
        expect_value_error(
            lambda ids=ids: ex.packed_causal_mask(ids),
            input=f"document_ids {describe(ids=ids)} ({why})",
            hint="accept (L,) or (B, L) integer tensors only",
        )


# ------------------------------------------------------------------------------------------ checkpoint

VOCAB, WIDTH = 24, 12


def build_run(seed: int):
    """Model (with dropout), AdamW, a LambdaLR warmup, a sampler generator, all from `seed`."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, WIDTH), torch.nn.Dropout(0.25), torch.nn.Linear(WIDTH, VOCAB))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 4))
    generator = torch.Generator().manual_seed(seed + 1)
    return model, optimizer, scheduler, generator


def train_steps(run, stream: torch.Tensor, steps: int) -> list[float]:
    model, optimizer, scheduler, generator = run
    losses = []
    for _ in range(steps):
        starts = torch.randint(len(stream) - 8, (4,), generator=generator)
        windows = stream[starts[:, None] + torch.arange(9)]
        logits = model(windows[:, :-1])  # dropout draws from the global RNG
        loss = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def resume_through(ex, folder: str, stream: torch.Tensor, total: int, resume_at: int):
    """Train `resume_at` steps, save, rebuild everything from another seed with a disturbed RNG, load, finish."""
    run = build_run(0)
    losses = train_steps(run, stream, resume_at)
    path = os.path.join(folder, f"resume_{resume_at}.pt")
    model, optimizer, scheduler, generator = run
    ex.save_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, generator=generator, step=resume_at)
    fresh = build_run(1234)  # a new process: other weights, other generator, other global RNG
    torch.rand(17)
    model, optimizer, scheduler, generator = fresh
    step = ex.load_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, generator=generator)
    losses += train_steps(fresh, stream, total - resume_at)
    return fresh, losses, step, path


@checks("checkpoint")
@one_thread()
def resume_is_bit_exact(ex):
    """resumed at step 0 and at step 3 of 6, training equals uninterrupted training bit for bit"""
    stream = torch.randint(0, VOCAB, (300,))
    total = 6
    straight = build_run(0)
    straight_losses = train_steps(straight, stream, total)
    with tempfile.TemporaryDirectory() as folder:
        for resume_at in (3, 0):
            resumed, losses, step, _ = resume_through(ex, folder, stream, total, resume_at)
            case = (
                f"Embedding-Dropout-Linear, AdamW, LambdaLR warmup, 6 steps; saved after {resume_at}, loaded into "
                "objects built from another seed (global RNG disturbed), then the remaining steps"
            )
            expect(
                step == resume_at,
                "load_checkpoint returned the wrong step",
                input=case,
                expected=str(resume_at),
                got=repr(step),
                hint="save the step and return it from load_checkpoint",
            )
            gaps = [
                (name, (a - b).abs().max().item())
                for (name, a), b in zip(resumed[0].named_parameters(), straight[0].parameters(), strict=True)
                if not torch.equal(a, b)
            ]
            expect(
                not gaps and losses == straight_losses,
                "the resumed run differs from the uninterrupted one",
                input=case,
                expected=f"the same losses {[round(x, 6) for x in straight_losses]} and bit-identical weights",
                got=f"losses {[round(x, 6) for x in losses]}; weights differ: {gaps}",
                hint="save and restore model, optimizer (AdamW moments), scheduler, the sampler's generator state "
                "and torch.get_rng_state() (dropout)",
            )


@checks("checkpoint")
@one_thread()
def checkpoint_restores_every_piece(ex):
    """a weights_only=True load works, and each piece (optimizer, scheduler, generator, global RNG) is restored"""
    stream = torch.randint(0, VOCAB, (300,))
    with tempfile.TemporaryDirectory() as folder:
        original = build_run(0)
        train_steps(original, stream, 3)
        rng_at_save = torch.get_rng_state()
        path = os.path.join(folder, "pieces.pt")
        model, optimizer, scheduler, generator = original
        ex.save_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, generator=generator, step=3)
        case = "a checkpoint saved after 3 AdamW steps, loaded into objects built from another seed"
        try:
            torch.load(path, weights_only=True)
            safe = ""
        except Exception as error:  # noqa: BLE001 - any failure to load safely is the finding
            safe = f"{type(error).__name__}: {str(error)[:200]}"
        expect(
            not safe,
            "the checkpoint does not load with torch.load(weights_only=True)",
            input=case,
            expected="only tensors, numbers, strings and containers of them",
            got=safe,
            hint="save state_dict()s and generator.get_state(), never the objects (or lambdas) themselves",
        )
        fresh = build_run(99)
        torch.rand(5)
        f_model, f_optimizer, f_scheduler, f_generator = fresh
        ex.load_checkpoint(path, model=f_model, optimizer=f_optimizer, scheduler=f_scheduler, generator=f_generator)
        adam_before = optimizer.state_dict()["state"]
        adam_after = f_optimizer.state_dict()["state"]
        pieces = {
            "model weights": all(
                torch.equal(a, b) for a, b in zip(model.parameters(), f_model.parameters(), strict=True)
            ),
            "optimizer state (AdamW exp_avg, exp_avg_sq, step)": set(adam_before) == set(adam_after)
            and all(
                torch.equal(adam_before[i][key], adam_after[i][key]) for i in adam_before for key in adam_before[i]
            ),
            "scheduler position (last_epoch)": f_scheduler.last_epoch == scheduler.last_epoch
            and f_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"],
            "sampler generator state": torch.equal(f_generator.get_state(), generator.get_state()),
            "global CPU RNG state (dropout)": torch.equal(torch.get_rng_state(), rng_at_save),
        }
        lost = [name for name, ok in pieces.items() if not ok]
        expect(
            not lost,
            f"not restored: {', '.join(lost)}",
            input=case,
            expected="every piece equal to the state at save time",
            got=f"differs: {lost}",
            hint="model/optimizer/scheduler.state_dict(), generator.get_state(), torch.get_rng_state(); restore each "
            "with load_state_dict / set_state / torch.set_rng_state",
        )


@checks("checkpoint")
def checkpoint_refuses_bad_input(ex):
    """a negative step, a file without the expected entries, a model of another shape: refused"""
    with tempfile.TemporaryDirectory() as folder:
        model, optimizer, scheduler, generator = build_run(0)
        objects = dict(model=model, optimizer=optimizer, scheduler=scheduler, generator=generator)
        expect_value_error(
            lambda: ex.save_checkpoint(os.path.join(folder, "neg.pt"), **objects, step=-1),
            input="save_checkpoint(..., step=-1)",
            hint="a step is >= 0",
        )
        partial = os.path.join(folder, "partial.pt")
        torch.save({"model": model.state_dict(), "step": 5}, partial)
        expect_value_error(
            lambda: ex.load_checkpoint(partial, **objects),
            input="load_checkpoint of a file holding only {'model', 'step'}",
            hint="check that every expected entry is there and name the missing ones in a ValueError",
        )
        good = os.path.join(folder, "good.pt")
        ex.save_checkpoint(good, **objects, step=2)
        wider = torch.nn.Sequential(
            torch.nn.Embedding(VOCAB, WIDTH + 1), torch.nn.Dropout(0.25), torch.nn.Linear(WIDTH + 1, VOCAB)
        )
        other = dict(objects, model=wider)
        expect_refused(
            lambda: ex.load_checkpoint(good, **other),
            input=f"load_checkpoint into a model of width {WIDTH + 1} (saved from width {WIDTH})",
            hint="load with model.load_state_dict(...) (strict by default): a shape mismatch must not pass silently",
            errors=(RuntimeError, ValueError),
        )
