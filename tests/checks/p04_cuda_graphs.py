"""Checks for p04.cuda_graphs. References: a brute-force scan of the bucket list; a full recompute of every sequence
from its first token (float64, `F.rms_norm` and causal `F.scaled_dot_product_attention`, written here, never the
solution's incremental step), with the same recompute in float32 as the baseline; a recorder (TorchDispatchMode) that
fails on every operation that synchronises with the CPU; the storage addresses of every buffer; and a capture/replay
emulator that records the operations of one call of the step and re-runs them on the same tensors after new inputs
were copied in, as a CUDA graph does, so that a value baked in at capture gives a stale result.
On a GPU: the learner's step captured in a real `torch.cuda.CUDAGraph`, and `GraphedDecoder`'s graphs replayed."""

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from llm_algo.bench import BenchRow, median_ms
from llm_algo.check import Checks, expect, expect_close, expect_refused, one_thread, reference_only

checks = Checks("p04.cuda_graphs")
checks.restrict(
    "GraphedDecoder",
    forbid=[torch.compile, torch.cuda.make_graphed_callables],
    instead="capture the graphs yourself with torch.cuda.CUDAGraph and torch.cuda.graph",
)

# Operations that make the CPU wait for the GPU (a value or a data-dependent shape comes back): illegal during
# capture. `.item()`, `.tolist()`, `int(t)`, `float(t)`, `bool(t)` and `print(t)` all reach `_local_scalar_dense`.
SYNCHRONISING = {
    "_local_scalar_dense": "reads a tensor's value on the CPU (.item(), .tolist(), int(t), float(t), bool(t), if t:)",
    "nonzero": "needs the number of nonzeros on the CPU (x[bool_mask], torch.nonzero, torch.where(cond))",
    "masked_select": "has a data-dependent output size",
    "_unique2": "has a data-dependent output size",
    "unique_dim": "has a data-dependent output size",
    "unique_consecutive": "has a data-dependent output size",
    "equal": "returns a Python bool (torch.equal)",
    "repeat_interleave": "has a data-dependent output size",
}


class GraphRuleBroken(AssertionError):
    pass


class CaptureEmulator(TorchDispatchMode):
    """While active: refuses synchronising operations and records every operation with its arguments and results.
    `replay()` runs the recorded operations again on the same tensors (the same addresses) and copies each fresh result
    into the tensor that capture produced, which is what a replayed CUDA graph does; Python values read at capture
    (ints, floats, tensors made from them) stay as they were."""

    def __init__(self):
        super().__init__()
        self.ops = []

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing is compiled under this mode; without this, torch wraps __torch_dispatch__ with
        # torch._disable_dynamo, whose first call imports torch._dynamo (seconds on a busy CPU).
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in SYNCHRONISING:
            raise GraphRuleBroken(f"`{name}` {SYNCHRONISING[name]}: a CPU synchronisation inside the step")
        out = func(*args, **kwargs)
        self.ops.append((func, args, kwargs, out))
        return out

    def replay(self) -> None:
        for func, args, kwargs, out in self.ops:
            fresh = func(*args, **kwargs)
            for captured, new in zip(tree_leaves(out), tree_leaves(fresh), strict=True):
                if isinstance(captured, torch.Tensor) and captured is not new:
                    if captured.shape != new.shape:
                        raise GraphRuleBroken(
                            f"`{func}` changed shape at replay: {tuple(captured.shape)} -> {tuple(new.shape)}"
                        )
                    if captured.data_ptr() != new.data_ptr() or captured.stride() != new.stride():
                        captured.copy_(new)


def model_of(ex, layers=3, dtype=torch.float32, seed=0, device="cpu"):
    return ex.make_tiny_decoder(
        num_layers=layers,
        dim=16,
        num_heads=2,
        ffn_dim=24,
        vocab_size=40,
        max_len=12,
        seed=seed,
        dtype=dtype,
        device=device,
    )


def reference_logits(model, tokens, dtype=torch.float64):
    """Full recompute of one sequence (positions 0..T-1) in `dtype`: the logits of its last token, (V,) on the CPU."""
    with reference_only():

        def w(t):
            return t.detach().to("cpu", dtype)

        length, heads, head_dim, dim = len(tokens), model.num_heads, model.head_dim, model.dim
        x = w(model.embed)[torch.tensor(tokens)] + w(model.pos_embed)[:length]  # (T, D)
        for layer in model.layers:
            h = F.rms_norm(x, (dim,), w(layer["attn_norm"]), eps=1e-6)
            q, k, v = ((h @ w(layer[n])).view(length, heads, head_dim).transpose(0, 1) for n in ("wq", "wk", "wv"))
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (H, T, hd)
            x = x + attn.transpose(0, 1).reshape(length, dim) @ w(layer["wo"])
            x = x + F.silu(F.rms_norm(x, (dim,), w(layer["mlp_norm"]), eps=1e-6) @ w(layer["w_up"])) @ w(
                layer["w_down"]
            )
        return (F.rms_norm(x, (dim,), w(model.final_norm), eps=1e-6) @ w(model.embed).T)[-1]


def expect_row_matches(got_row, model, tokens, label, hint):
    oracle = reference_logits(model, tokens, torch.float64)
    baseline = None if got_row.dtype == torch.float64 else reference_logits(model, tokens, got_row.dtype)
    expect_close(got_row.detach().cpu(), oracle, baseline=baseline, input=label, what="logits", hint=hint)


def schedule(batch, steps, vocab, generator):
    """Rows join at different steps (row b at step b % 3), so that positions differ; before joining a row is padding
    (token 0, position 0). Returns per step (token_ids, positions) and each row's tokens."""
    starts = [b % 3 for b in range(batch)]
    sequences = [torch.randint(1, vocab, (steps,), generator=generator).tolist() for _ in range(batch)]
    plan = []
    for t in range(steps):
        ids = [sequences[b][t - starts[b]] if t >= starts[b] else 0 for b in range(batch)]
        pos = [t - starts[b] if t >= starts[b] else 0 for b in range(batch)]
        plan.append((torch.tensor(ids), torch.tensor(pos)))
    return starts, sequences, plan


STEP_HINT = (
    "x = embed[token_ids] + pos_embed[positions]; per layer write k, v at [layer, slots, :, positions], "
    "attend over the slot's whole row with columns <= position visible; logits into self.logits"
)


def run_steps(ex, model, batch, num_slots, steps, generator, replay=False):
    """Drive the learner's step through the schedule; yields (t, row, logits row, tokens so far) for active rows.
    With replay=True the first step is captured by the emulator and the others are replays of it."""
    k_cache, v_cache = ex.allocate_kv_cache(model, num_slots)
    decode = ex.StaticDecodeStep(model, batch, k_cache, v_cache)
    slots = torch.randperm(num_slots, generator=generator)[:batch]
    starts, sequences, plan = schedule(batch, steps, model.vocab_size, generator)
    emulator, out = None, None
    for t, (ids, pos) in enumerate(plan):
        decode.set_inputs(ids.to(model.embed.device), pos.to(model.embed.device), slots.to(model.embed.device))
        if not replay:
            out = decode.step()
        elif emulator is None:
            emulator = CaptureEmulator()
            with emulator:
                out = decode.step()
        else:
            emulator.replay()
        for b in range(batch):
            if t >= starts[b]:
                yield t, b, out[b], sequences[b][: t - starts[b] + 1], slots.tolist()


@checks("StaticDecodeStep")
@one_thread()
def matches_full_recompute(ex):
    """eager steps, rows at different positions in shuffled slots: every active row's logits equal a full recompute
    of its sequence (float64 and float32; 3 and 32 layers; batch 1 and 4)"""
    generator = torch.Generator().manual_seed(1)
    for layers, dtype, batch, steps in ((3, torch.float64, 4, 7), (3, torch.float32, 1, 5), (32, torch.float32, 3, 4)):
        model = model_of(ex, layers, dtype)
        for t, b, row, tokens, slots in run_steps(ex, model, batch, 6, steps, generator):
            label = f"{layers} layers, {dtype}, batch {batch}, slots {slots}, step {t}, row {b} at position {len(tokens) - 1}"
            expect_row_matches(row, model, tokens, label, STEP_HINT)


@checks("StaticDecodeStep")
@one_thread()
def replayed_like_a_cuda_graph(ex):
    """capture the first step (the emulator records its operations), then for 6 more steps copy new inputs in with
    set_inputs and replay the recording: the tensor returned at capture holds each step's correct logits"""
    generator = torch.Generator().manual_seed(2)
    for layers, batch in ((2, 3), (4, 2)):
        model = model_of(ex, layers, torch.float64)
        try:
            for t, b, row, tokens, slots in run_steps(ex, model, batch, 5, 7, generator, replay=True):
                label = (
                    f"{layers} layers, batch {batch}, slots {slots}, captured at step 0, replayed at step {t}, "
                    f"row {b} at position {len(tokens) - 1}"
                )
                expect_row_matches(
                    row,
                    model,
                    tokens,
                    label,
                    "a replay re-runs the captured kernels on the captured addresses: copy_ the inputs into the static "
                    "buffers (never rebind them), take positions from the tensor (not a Python int), write the output "
                    "into self.logits",
                )
        except GraphRuleBroken as error:
            expect(
                False,
                "the step breaks a CUDA graph rule",
                input=f"{layers} layers, batch {batch}",
                expected="no CPU synchronisation, no data-dependent shape",
                got=str(error),
                hint="index with the position and slot tensors; build the mask on the device",
            )


@checks("StaticDecodeStep")
def no_synchronisation_in_step(ex):
    """step() under a recorder of CPU synchronisations (.item(), .tolist(), int/float/bool of a tensor, nonzero,
    boolean-mask indexing): none"""
    generator = torch.Generator().manual_seed(3)
    model = model_of(ex, 2)
    k_cache, v_cache = ex.allocate_kv_cache(model, 4)
    decode = ex.StaticDecodeStep(model, 3, k_cache, v_cache)
    decode.set_inputs(torch.randint(0, 40, (3,), generator=generator), torch.tensor([0, 5, 2]), torch.tensor([3, 0, 1]))
    try:
        with CaptureEmulator():
            decode.step()
        broken = None
    except GraphRuleBroken as error:
        broken = str(error)
    expect(
        broken is None,
        "step() synchronises with the CPU",
        input="2 layers, batch 3, positions [0, 5, 2]",
        expected="only device-side tensor operations (capture refuses a sync)",
        got=broken,
        hint="keep the position as a tensor: cache[layer, slots, :, positions] = k; mask = key_index <= positions[:, None]",
    )


@checks("StaticDecodeStep")
def static_addresses(ex):
    """over 4 steps: step() returns self.logits; token_ids, positions, slots, logits and both caches keep their
    storage; the caches handed in are the ones written (at [layer, slot, :, position])"""
    generator = torch.Generator().manual_seed(4)
    model = model_of(ex, 2)
    k_cache, v_cache = ex.allocate_kv_cache(model, 5)
    decode = ex.StaticDecodeStep(model, 2, k_cache, v_cache)
    names = ("token_ids", "positions", "slots", "logits", "k_cache", "v_cache")

    def addresses():
        return {n: getattr(decode, n).untyped_storage().data_ptr() for n in names}

    before = addresses()
    for t in range(4):
        positions = torch.tensor([t, t + 3])
        slots = torch.tensor([4, 1])
        decode.set_inputs(torch.randint(0, 40, (2,), generator=generator), positions, slots)
        out = decode.step()
        label = f"2 layers, batch 2, step {t}"
        moved = [n for n, a in addresses().items() if a != before[n]]
        expect(
            not moved,
            "a static buffer was replaced",
            input=label,
            expected="the storage allocated in __init__",
            got=f"new storage for {moved}",
            hint="copy_ into the buffers (self.x.copy_(new)), write caches in place: a graph keeps the old address",
        )
        expect(
            isinstance(out, torch.Tensor) and out.data_ptr() == before["logits"] and out.shape == (2, 40),
            "step() does not return the static logits buffer",
            input=label,
            expected="self.logits (2, 40), the buffer allocated in __init__",
            got=f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}",
            hint="self.logits.copy_(...); return self.logits",
        )
        written = k_cache[:, slots, :, positions].abs().sum().item()
        expect(
            written > 0,
            "the K cache handed to the constructor was not written",
            input=label,
            expected="nonzero keys at k_cache[:, slots, :, positions]",
            got="zeros",
            hint="write into the caches given to __init__, in place",
        )


@checks("StaticDecodeStep")
def refuses_bad_input(ex):
    """batch_size 0, caches of the wrong shape: ValueError; set_inputs with floats or a list: TypeError; wrong shape,
    token >= V, position >= T_max, slot outside the cache: ValueError"""
    model = model_of(ex, 2)
    k_cache, v_cache = ex.allocate_kv_cache(model, 3)
    expect_refused(
        lambda: ex.StaticDecodeStep(model, 0, k_cache, v_cache),
        input="batch_size=0",
        hint="batch_size must be an int >= 1",
        errors=(ValueError,),
    )
    wrong = torch.zeros(2, 3, 2, 12, 7)
    expect_refused(
        lambda: ex.StaticDecodeStep(model, 2, wrong, v_cache),
        input="k_cache (2, 3, 2, 12, 7), head_dim 8",
        hint="k_cache must be (L, S, H, T_max, hd) of this model",
        errors=(ValueError,),
    )
    expect_refused(
        lambda: ex.StaticDecodeStep(model, 2, k_cache, v_cache[:1]),
        input="v_cache with 1 layer of 2",
        hint="v_cache must be (L, S, H, T_max, hd) of this model",
        errors=(ValueError,),
    )
    decode = ex.StaticDecodeStep(model, 2, k_cache, v_cache)
    good = (torch.tensor([1, 2]), torch.tensor([0, 3]), torch.tensor([0, 2]))
    cases = [
        ((torch.tensor([1.0, 2.0]), good[1], good[2]), "float token_ids", TypeError),
        ((good[0], [0, 3], good[2]), "positions as a list", TypeError),
        ((torch.tensor([1, 2, 3]), good[1], good[2]), "token_ids (3,) for batch 2", ValueError),
        ((good[0], good[1], torch.tensor([[0, 2]])), "slots (1, 2)", ValueError),
        ((torch.tensor([1, 40]), good[1], good[2]), "token 40 with V = 40", ValueError),
        ((good[0], torch.tensor([0, 12]), good[2]), "position 12 with T_max = 12", ValueError),
        ((good[0], torch.tensor([-1, 0]), good[2]), "position -1", ValueError),
        ((good[0], good[1], torch.tensor([0, 3])), "slot 3 of a 3-slot cache", ValueError),
    ]
    for args, label, error in cases:
        expect_refused(
            lambda args=args: decode.set_inputs(*args),
            input=f"set_inputs with {label}",
            hint="validate in set_inputs (outside the graph): integer tensors (B,), values in range",
            errors=(error,),
        )
    decode.set_inputs(*good)  # the limits themselves are accepted
    decode.set_inputs(torch.tensor([0, 39]), torch.tensor([0, 11]), torch.tensor([0, 2]))


def capture_on_gpu(decode):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            decode.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode.step()
    return graph, out


@checks("StaticDecodeStep", requires_cuda=True)
@one_thread()
def captured_in_a_real_cuda_graph(ex):
    """on a GPU: the step captured in a torch.cuda.CUDAGraph (after a warm-up on a side stream), then new inputs
    copied in and the graph replayed for 6 steps: each replay equals a full recompute"""
    generator = torch.Generator().manual_seed(5)
    model = model_of(ex, 4, torch.float32, device="cuda")
    k_cache, v_cache = ex.allocate_kv_cache(model, 5)
    decode = ex.StaticDecodeStep(model, 3, k_cache, v_cache)
    slots = torch.tensor([4, 0, 2])
    starts, sequences, plan = schedule(3, 7, model.vocab_size, generator)
    graph = out = None
    for t, (ids, pos) in enumerate(plan):
        decode.set_inputs(ids.cuda(), pos.cuda(), slots.cuda())
        if graph is None:
            decode.step()  # step 0 eagerly; the warm-up of the capture re-runs it with the same inputs
            graph, out = capture_on_gpu(decode)
        graph.replay()
        torch.cuda.synchronize()
        for b in range(3):
            if t >= starts[b]:
                expect_row_matches(
                    out[b],
                    model,
                    sequences[b][: t - starts[b] + 1],
                    f"4 layers, cuda, batch 3, replay at step {t}, row {b}",
                    STEP_HINT,
                )


# ----- pad_batch


def brute_force_bucket(batch, buckets):
    best = None
    for b in sorted(buckets):
        if b >= batch:
            best = b
            break
    return best


VLLM_LIKE = [1, 2, 4] + list(range(8, 257, 8))


@checks("pad_batch")
def bucket_matches_brute_force(ex):
    """every batch from 1 to the largest bucket, for vLLM's list (1, 2, 4, 8, 16, ... 256), a shuffled list with
    repeats and a single bucket: the smallest bucket >= batch"""
    generator = torch.Generator().manual_seed(6)
    shuffled = [int(b) for b in torch.randint(1, 40, (9,), generator=generator)] + [17, 17]
    for buckets in (VLLM_LIKE, shuffled, [5], (3, 1)):
        for batch in range(1, max(buckets) + 1):
            got = ex.bucket_for(batch, buckets)
            want = brute_force_bucket(batch, buckets)
            expect(
                got == want and isinstance(got, int),
                "not the smallest bucket that holds the batch",
                input=f"batch {batch}, buckets {list(buckets)[:12]}{' ...' if len(buckets) > 12 else ''}",
                expected=str(want),
                got=repr(got),
                hint="min(b for b in buckets if b >= batch): a batch equal to a bucket uses that bucket",
            )


@checks("pad_batch")
def bucket_refuses(ex):
    """a batch above the largest bucket, batch 0 or -1, an empty or non-positive bucket list: ValueError; a float or
    bool batch: TypeError"""
    cases = [
        (lambda: ex.bucket_for(9, [1, 2, 4, 8]), "batch 9, buckets [1, 2, 4, 8]", ValueError),
        (lambda: ex.bucket_for(257, VLLM_LIKE), "batch 257, buckets up to 256", ValueError),
        (lambda: ex.bucket_for(0, [1, 2]), "batch 0", ValueError),
        (lambda: ex.bucket_for(-1, [1, 2]), "batch -1", ValueError),
        (lambda: ex.bucket_for(1, []), "no buckets", ValueError),
        (lambda: ex.bucket_for(1, [0, 4]), "buckets [0, 4]", ValueError),
        (lambda: ex.bucket_for(2.0, [1, 2]), "batch 2.0", TypeError),
        (lambda: ex.bucket_for(True, [1, 2]), "batch True", TypeError),
    ]
    for call, label, error in cases:
        expect_refused(
            call,
            input=f"bucket_for: {label}",
            hint="refuse what no captured graph can run: a batch above max(buckets) must be split or run "
            "eagerly, never truncated",
            errors=(error,),
        )


@checks("pad_batch")
def pads_to_the_bucket(ex):
    """random batches (int64 and int32): outputs (P,) of the bucket, same dtype, the real rows first and unchanged;
    padding rows token 0, position 0, slot pad_slot; the inputs untouched"""
    generator = torch.Generator().manual_seed(7)
    buckets = [1, 2, 4, 8, 16]
    for batch, dtype in ((1, torch.int64), (3, torch.int64), (5, torch.int32), (8, torch.int64), (13, torch.int32)):
        ids = torch.randint(1, 100, (batch,), generator=generator, dtype=dtype)
        pos = torch.randint(1, 30, (batch,), generator=generator, dtype=dtype)
        slots = torch.randint(0, 7, (batch,), generator=generator, dtype=dtype)
        copies = (ids.clone(), pos.clone(), slots.clone())
        out = ex.pad_batch(ids, pos, slots, buckets, 7)
        size = brute_force_bucket(batch, buckets)
        label = f"batch {batch} {dtype}, buckets {buckets}, pad_slot 7"
        for name, got, real, pad in zip(("token_ids", "positions", "slots"), out, copies, (0, 0, 7), strict=True):
            want = torch.full((size,), pad, dtype=dtype)
            want[:batch] = real
            expect(
                isinstance(got, torch.Tensor) and got.dtype == dtype and torch.equal(got, want),
                f"padded {name} wrong",
                input=label,
                expected=f"{want.tolist()} ({dtype})",
                got=f"{got.tolist() if isinstance(got, torch.Tensor) else got!r} "
                f"({getattr(got, 'dtype', type(got).__name__)})",
                hint="P = bucket_for(B, buckets); the real rows first; padding: token 0, position 0 (a valid index), "
                "slot pad_slot (scratch memory, never a live sequence's slot)",
            )
        expect(
            all(torch.equal(a, b) for a, b in zip((ids, pos, slots), copies, strict=True)),
            "the inputs were modified",
            input=label,
            expected="inputs unchanged",
            got="changed",
            hint="allocate new (P,) tensors",
        )


@checks("pad_batch")
def pad_batch_refuses(ex):
    """inputs of different lengths, a 2-D input, a batch above the largest bucket: ValueError"""
    ids, pos, slots = torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2])
    cases = [
        (lambda: ex.pad_batch(ids, pos[:2], slots, [4], 9), "positions (2,) with token_ids (3,)"),
        (lambda: ex.pad_batch(ids, pos, slots[:1], [4], 9), "slots (1,) with token_ids (3,)"),
        (lambda: ex.pad_batch(ids[None], pos[None], slots[None], [4], 9), "inputs (1, 3)"),
        (lambda: ex.pad_batch(ids, pos, slots, [1, 2], 9), "batch 3, buckets [1, 2]"),
    ]
    for call, label in cases:
        expect_refused(
            call,
            input=f"pad_batch: {label}",
            hint="1-D inputs of one length; a batch that fits a bucket",
            errors=(ValueError,),
        )


# ----- GraphedDecoder


# Each step: the slots that run (in this order); a slot listed in RESTART starts a new sequence at that step.
WORKLOAD = [[0, 1], [1, 0, 2], [3, 0, 2, 1], [0, 3], [1, 0, 2], [2, 3, 0, 1], [0], [4, 0, 3], [0, 4, 1]]
RESTART = {4: [1]}  # slot 1's sequence ends after step 3; a new one starts there at step 4 (position 0 again)


def workload(vocab, generator):
    """Sequences that join, wait (a step without them), leave and reuse a slot. The sequence in slot 0 runs in every
    step, so a padding row written to slot 0 would overwrite its first key and value. Per step: [(slot, tokens)]."""
    live, plan = {}, []
    for t, slots in enumerate(WORKLOAD):
        batch = []
        for slot in slots:
            if slot in RESTART.get(t, ()):
                live[slot] = []
            live.setdefault(slot, []).append(int(torch.randint(1, vocab, (1,), generator=generator)))
            batch.append((slot, list(live[slot])))
        plan.append(batch)
    return plan


def serve(ex, decoder, plan, model, label):
    device = model.embed.device
    for t, batch in enumerate(plan):
        slots = torch.tensor([s for s, _ in batch], device=device)
        ids = torch.tensor([tokens[-1] for _, tokens in batch], device=device)
        pos = torch.tensor([len(tokens) - 1 for _, tokens in batch], device=device)
        out = decoder(ids, pos, slots)
        expect(
            isinstance(out, torch.Tensor) and out.shape == (len(batch), model.vocab_size),
            "the logits do not have the batch's shape",
            input=f"{label}, step {t}, batch {len(batch)}",
            expected=f"({len(batch)}, {model.vocab_size})",
            got=f"{tuple(getattr(out, 'shape', ()))}",
            hint="return the first B rows of the bucket's logits",
        )
        for row, (slot, tokens) in enumerate(batch):
            expect_row_matches(
                out[row],
                model,
                tokens,
                f"{label}, step {t}, batch {len(batch)}, slot {slot} at position {len(tokens) - 1}",
                "pad to the bucket with pad_batch (padding rows in the scratch slot pad_slot), "
                "set_inputs, replay or step, return logits[:B]",
            )


@checks("GraphedDecoder")
@one_thread()
def serves_batches_of_every_size(ex):
    """sequences join, wait, leave and reuse slots; batches of 1 to 4 through buckets [1, 2, 4] and [4]: every row
    equals a full recompute of its sequence (padding rows never touch a live slot)"""
    generator = torch.Generator().manual_seed(8)
    for buckets in ([4, 1, 2, 2], [4]):
        model = model_of(ex, 2, torch.float64, seed=3)
        decoder = ex.GraphedDecoder(model, buckets, 5)
        serve(ex, decoder, workload(model.vocab_size, generator), model, f"2 layers, buckets {buckets}, 5 slots")


@checks("GraphedDecoder")
def structure_and_copies(ex):
    """buckets sorted without repeats, pad_slot = num_slots, one cache of num_slots + 1 slots shared by a step per
    bucket; the result is a copy that the next call does not change"""
    model = model_of(ex, 2)
    decoder = ex.GraphedDecoder(model, [8, 2, 4, 2, 1], 6)
    label = "GraphedDecoder(model, [8, 2, 4, 2, 1], num_slots=6)"
    expect(
        list(decoder.buckets) == [1, 2, 4, 8] and decoder.pad_slot == 6,
        "buckets or pad_slot wrong",
        input=label,
        expected="buckets [1, 2, 4, 8], pad_slot 6",
        got=f"buckets {decoder.buckets}, pad_slot {decoder.pad_slot}",
        hint="sorted(set(buckets)); the scratch slot is the one after the sequences' slots",
    )
    shape = (2, 7, model.num_heads, model.max_len, model.head_dim)
    expect(
        tuple(decoder.k_cache.shape) == shape and tuple(decoder.v_cache.shape) == shape,
        "the KV cache does not have num_slots + 1 slots",
        input=label,
        expected=str(shape),
        got=str(tuple(decoder.k_cache.shape)),
        hint="allocate_kv_cache(model, num_slots + 1)",
    )
    sizes = {b: (s.token_ids.shape[0], s.k_cache.data_ptr(), s.v_cache.data_ptr()) for b, s in decoder.steps.items()}
    want = {b: (b, decoder.k_cache.data_ptr(), decoder.v_cache.data_ptr()) for b in (1, 2, 4, 8)}
    expect(
        sizes == want,
        "not one step per bucket on the shared cache",
        input=label,
        expected="steps[b]: batch b, the decoder's k_cache and v_cache",
        got=str(sizes),
        hint="StaticDecodeStep(model, b, self.k_cache, self.v_cache) for every bucket",
    )
    used = []
    for size, step in decoder.steps.items():
        original = step.set_inputs
        step.set_inputs = lambda *args, size=size, original=original: used.append(size) or original(*args)
    for batch, bucket in ((1, 1), (3, 4), (2, 2), (5, 8), (8, 8)):
        used.clear()
        decoder(torch.arange(1, batch + 1), torch.arange(batch), torch.arange(batch) % 6)
        expect(
            used == [bucket],
            "the batch did not run in the smallest bucket that holds it",
            input=f"{label}, a batch of {batch}",
            expected=f"steps[{bucket}] (set_inputs once)",
            got=f"set_inputs of steps {used}",
            hint="pad with pad_batch and use the step of the padded size",
        )
    first = decoder(torch.tensor([3, 4, 5]), torch.tensor([0, 0, 0]), torch.tensor([0, 1, 2]))
    kept = first.clone()
    decoder(torch.tensor([6, 7, 8]), torch.tensor([1, 1, 1]), torch.tensor([0, 1, 2]))
    expect(
        torch.equal(first, kept),
        "the returned logits changed on the next call",
        input=f"{label}, two calls",
        expected="the first result unchanged",
        got="overwritten by the second call",
        hint="the static logits belong to the graph: return step.logits[:B].clone()",
    )


@checks("GraphedDecoder")
def graphed_decoder_refuses(ex):
    """num_slots 0, an empty or non-positive bucket list, a batch above the largest bucket: ValueError; one slot and
    buckets [1] accepted"""
    model = model_of(ex, 1)
    for call, label in (
        (lambda: ex.GraphedDecoder(model, [1, 2], 0), "num_slots=0"),
        (lambda: ex.GraphedDecoder(model, [], 2), "buckets []"),
        (lambda: ex.GraphedDecoder(model, [0, 2], 2), "buckets [0, 2]"),
    ):
        expect_refused(
            call,
            input=f"GraphedDecoder: {label}",
            hint="num_slots >= 1; buckets as bucket_for wants them",
            errors=(ValueError,),
        )
    smallest = ex.GraphedDecoder(model, [1], 1)  # the limits themselves: one bucket of 1, one slot
    out = smallest(torch.tensor([5]), torch.tensor([0]), torch.tensor([0]))
    expect(
        tuple(out.shape) == (1, model.vocab_size),
        "one slot and one bucket of 1 do not work",
        input="GraphedDecoder(model, [1], num_slots=1), a batch of 1",
        expected=f"logits (1, {model.vocab_size})",
        got=f"{tuple(out.shape)}",
        hint="num_slots >= 1 and a bucket list [1] are valid",
    )
    decoder = ex.GraphedDecoder(model, [1, 2], 4)
    expect_refused(
        lambda: decoder(torch.tensor([1, 2, 3]), torch.zeros(3, dtype=torch.long), torch.tensor([0, 1, 2])),
        input="a batch of 3 with buckets [1, 2]",
        hint="pad_batch refuses a batch above the largest bucket",
        errors=(ValueError,),
    )


@checks("GraphedDecoder", requires_cuda=True)
@one_thread()
def replays_graphs_on_gpu(ex):
    """on a GPU: a torch.cuda.CUDAGraph for every bucket; __call__ replays it (the eager step is never called after
    construction) and every row equals a full recompute"""
    generator = torch.Generator().manual_seed(9)
    model = model_of(ex, 3, torch.float32, device="cuda")
    decoder = ex.GraphedDecoder(model, [1, 2, 4], 5)
    expect(
        sorted(decoder.graphs) == [1, 2, 4]
        and all(isinstance(g, torch.cuda.CUDAGraph) for g in decoder.graphs.values()),
        "not one CUDA graph per bucket",
        input="GraphedDecoder(model on cuda, [1, 2, 4], 5)",
        expected="graphs {1, 2, 4}: torch.cuda.CUDAGraph",
        got=str({b: type(g).__name__ for b, g in decoder.graphs.items()}),
        hint="capture each bucket's step with torch.cuda.graph(g, pool=...) after a warm-up on a side stream",
    )
    eager_calls = []
    for step in decoder.steps.values():
        original = step.step
        step.step = lambda original=original: eager_calls.append(1) or original()
    serve(ex, decoder, workload(model.vocab_size, generator), model, "3 layers, cuda, buckets [1, 2, 4]")
    expect(
        not eager_calls,
        "__call__ ran the eager step instead of replaying",
        input="cuda, buckets [1, 2, 4]",
        expected="only graph replays after construction",
        got=f"{len(eager_calls)} eager step() calls",
        hint="self.graphs[bucket].replay() where a graph exists",
    )


def benchmark(ex):
    """A 32-layer tiny decode step (dim 64, 4 heads, 256 tokens of context), batch 1 and 8: the eager step against a
    replay of its CUDA graph (the launch-overhead ratio), with the graph replay of GraphedDecoder's bucket path."""
    rows = []
    model = ex.make_tiny_decoder(
        num_layers=32, dim=64, num_heads=4, ffn_dim=128, vocab_size=256, max_len=256, device="cuda"
    )
    for batch in (1, 8):
        k_cache, v_cache = ex.allocate_kv_cache(model, batch)
        decode = ex.StaticDecodeStep(model, batch, k_cache, v_cache)
        decode.set_inputs(
            torch.randint(0, 256, (batch,), device="cuda"),
            torch.full((batch,), 100, device="cuda"),
            torch.arange(batch, device="cuda"),
        )
        graph, _ = capture_on_gpu(decode)
        shape = f"32 layers, dim 64, batch {batch}, T_max 256"
        eager_ms = median_ms(decode.step)
        graph_ms = median_ms(graph.replay)
        rows.append(BenchRow("eager decode step", shape, eager_ms, 1.0, "x eager"))
        rows.append(BenchRow("CUDA graph replay", shape, graph_ms, eager_ms / graph_ms, "x eager"))
        served = ex.GraphedDecoder(model, [batch], batch)
        ids, pos, slots = decode.token_ids.clone(), decode.positions.clone(), decode.slots.clone()
        served_ms = median_ms(lambda served=served, ids=ids, pos=pos, slots=slots: served(ids, pos, slots))
        rows.append(
            BenchRow(
                "GraphedDecoder call (pad, copy in, replay, copy out)",
                shape,
                served_ms,
                eager_ms / served_ms,
                "x eager",
            )
        )
    return rows
