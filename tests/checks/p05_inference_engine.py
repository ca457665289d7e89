"""Checks for p05.inference_engine, graded on outcomes. References written here, independently of the solutions:
full forwards of each sequence alone without any cache (float64 copies of the model as the oracle, float32 as the
baseline of the tolerance policy); greedy decoding by full recomputation of each request alone, and the learner's
own plain `generate_greedy`; sampled decoding of each request alone with its own seeded generator through the
`sample_next_token` the lesson uses (graded in p02.sampling); the blocks and sequences left in the stores; the rows
and token slots of every forward, recorded by a forward hook on the model (not by the engine's own statistics); and
the token slots of naive static batching in closed form.

Thresholds (stated in the lesson), on the 12-request trace with max_num_seqs 4: naive static batching computes at least
1.3 times the engine's token slots (the reference solution: 268 / 167 = 1.60), and decoding one request at a time runs
at least 2 times the engine's forwards (the reference solution: 101 / 43 = 2.35)."""

import copy

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_value_error, one_thread

checks = Checks("p05.inference_engine")

SLOT_RATIO = 1.3
CALL_RATIO = 2.0
TRACE = "12-request trace (make_trace(12, seed=3)), make_model(seed=0), 2 layers"


def full_logits(model, tokens) -> torch.Tensor:
    """(T, V) logits of one sequence by a plain forward without cache."""
    with torch.no_grad():
        return model(torch.tensor([tokens]))[0]


def reference_greedy(model, prompt, max_new) -> list:
    tokens = list(prompt)
    for _ in range(max_new):
        tokens.append(int(full_logits(model, tokens)[-1].argmax()))
    return tokens[len(prompt) :]


def reference_sampled(ex, model, request, processors) -> list:
    generator = torch.Generator().manual_seed(request.seed)
    tokens = list(request.prompt)
    for _ in range(request.max_new_tokens):
        logits = full_logits(model, tokens)[-1]
        token = ex.sample_next_token(
            torch.tensor([tokens]), logits[None], processors, generator=generator, do_sample=True
        )
        tokens.append(int(token[0]))
    return tokens[len(request.prompt) :]


def fresh_trace(ex, n=12, seed=3):
    return ex.make_trace(n, seed=seed)


class Recorder:
    """A forward hook that records (B, T) of every call of the model and the sequence ids it was given."""

    def __init__(self, model):
        self.shapes, self.seq_ids, self.step_of_call = [], [], []
        self.step = 0
        self.handle = model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        input_ids = args[0] if args else kwargs["input_ids"]
        self.shapes.append(tuple(input_ids.shape))
        caches = kwargs.get("caches") if "caches" in kwargs else (args[3] if len(args) > 3 else None)
        self.seq_ids.append(list(getattr(caches[0], "seq_ids", [])) if caches else [])
        self.step_of_call.append(self.step)

    def close(self):
        self.handle.remove()


def counted_step(engine, recorder):
    original = engine.step

    def step():
        recorder.step += 1
        return original()

    engine.step = step


def naive_slots(requests, batch) -> int:
    total = 0
    for start in range(0, len(requests), batch):
        group = requests[start : start + batch]
        total += len(group) * (max(len(r.prompt) for r in group) + max(r.max_new_tokens for r in group) - 1)
    return total


def compare_outputs(outputs, expected, what, input, hint):
    expect(
        isinstance(outputs, dict) and set(outputs) == set(expected),
        "the engine did not return one output per request",
        input=input,
        expected=f"outputs for request ids {sorted(expected)}",
        got=f"{type(outputs).__name__} with ids {sorted(outputs) if isinstance(outputs, dict) else '?'}",
        hint="run() collects request.output of every finished request under its request_id",
    )
    for rid in sorted(expected):
        expect(
            list(outputs[rid]) == expected[rid],
            f"request {rid}: the engine's tokens differ from {what}",
            input=input,
            expected=str(expected[rid]),
            got=str(list(outputs[rid])),
            hint=hint,
        )


# ------------------------------------------------------------------------------------------------- paged_forward


def prefilled(ex, model, lengths, num_blocks=32, block_size=4):
    """Stores with one sequence per length, each prefilled alone by the learner's paged_forward; also returns the
    tokens and the prefill logits."""
    stores = ex.make_stores(model, num_blocks, block_size)
    tokens, logits = {}, {}
    for seq_id, length in enumerate(lengths):
        for store in stores:
            store.add_sequence(seq_id)
        tokens[seq_id] = torch.randint(0, 64, (length,)).tolist()
        logits[seq_id] = ex.paged_forward(model, stores, [seq_id], torch.tensor([tokens[seq_id]]))
    return stores, tokens, logits


def expect_logits(got, model, tokens, positions, input, hint):
    """got (len(positions), V) against a float64 copy of the model on the whole sequence at those positions."""
    oracle = full_logits(copy.deepcopy(model).double(), tokens)[positions]
    baseline = full_logits(model, tokens)[positions]
    expect_close(got, oracle, input=input, baseline=baseline, hint=hint)


@checks("paged_forward")
@one_thread()
def prefill_and_batched_decode(ex):
    """prefill alone, then 3 batched decode steps of 3 sequences of lengths 3, 7, 10: logits equal full forwards"""
    model = ex.make_model(seed=1)
    lengths = [3, 7, 10]
    stores, tokens, logits = prefilled(ex, model, lengths)
    for seq_id, length in enumerate(lengths):
        expect_tensor_shape = tuple(logits[seq_id].shape) == (1, length, 64)
        expect(
            expect_tensor_shape,
            "the prefill logits have the wrong shape",
            input=f"prefill of {length} tokens",
            expected=f"(1, {length}, 64)",
            got=str(tuple(logits[seq_id].shape)),
            hint="return the model's logits",
        )
        expect_logits(
            logits[seq_id][0],
            model,
            tokens[seq_id],
            slice(0, length),
            input=f"prefill of sequence {seq_id}, {length} tokens, block_size 4",
            hint="position_ids 0..T-1 for an empty sequence; the mask covers the new tokens",
        )
    for step in range(3):
        new = torch.randint(0, 64, (3, 1))
        out = ex.paged_forward(model, stores, [0, 1, 2], new)
        expect(
            tuple(out.shape) == (3, 1, 64),
            "the decode logits have the wrong shape",
            input="decode of 3 rows",
            expected="(3, 1, 64)",
            got=str(tuple(out.shape)),
            hint="one (B, T, V) forward for the batch",
        )
        for seq_id in range(3):
            tokens[seq_id].append(int(new[seq_id, 0]))
            expect_logits(
                out[seq_id],
                model,
                tokens[seq_id],
                slice(-1, None),
                input=f"decode step {step + 1}, row {seq_id} (cached {len(tokens[seq_id]) - 1} tokens; "
                f"other rows cached {[len(t) - 1 for t in tokens.values()]})",
                hint="each row's positions start at its own cached length L_b, and the mask hides the "
                "padding of shorter rows",
            )


@checks("paged_forward")
@one_thread()
def two_new_tokens_on_ragged_rows(ex):
    """T = 2 new tokens on rows with 2 and 6 cached tokens: logits equal full forwards (causal inside the new part)"""
    model = ex.make_model(seed=2)
    stores, tokens, _ = prefilled(ex, model, [2, 6], block_size=3)
    new = torch.randint(0, 64, (2, 2))
    out = ex.paged_forward(model, stores, [0, 1], new)
    for seq_id in range(2):
        tokens[seq_id] += new[seq_id].tolist()
        expect_logits(
            out[seq_id],
            model,
            tokens[seq_id],
            slice(-2, None),
            input=f"row {seq_id}: {len(tokens[seq_id]) - 2} cached + 2 new tokens (other row: "
            f"{len(tokens[1 - seq_id]) - 2} cached), block_size 3",
            hint="left-pad every row so that its last L_b + T key positions are real: the causal mask is "
            "bottom-right aligned, so right padding lets a short row's first new token see its second",
        )


def left_padded(rows):
    """[(H_kv, L_b, D)] -> (B, H_kv, max L_b, D), zeros on the left of the shorter rows: the expected update result."""
    longest = max(row.shape[1] for row in rows)
    out = torch.zeros(len(rows), rows[0].shape[0], longest, rows[0].shape[2], dtype=rows[0].dtype)
    for b, row in enumerate(rows):
        out[b, :, longest - row.shape[1] :] = row
    return out


@checks("paged_forward")
def layer_cache_update_with_num_new(ex):
    """PagedLayerCache.update(k, v) and update(k, v, num_new=T for every row) (what a KVCache caller passes in decode
    and for an unpadded chunk): both append T tokens per row and return the rows left-padded"""
    heads, dim, lengths = 2, 8, [3, 6]
    history = {seq_id: torch.randn(heads, length, dim) for seq_id, length in enumerate(lengths)}
    values = {seq_id: torch.randn(heads, length, dim) for seq_id, length in enumerate(lengths)}
    stores = {}
    for how in ("num_new=None", "num_new=T"):
        store = ex.PagedKVCache(16, 4, heads, dim)
        for seq_id in history:
            store.add_sequence(seq_id)
            store.append(
                seq_id, history[seq_id].transpose(0, 1).contiguous(), values[seq_id].transpose(0, 1).contiguous()
            )
        stores[how] = store
    for T in (1, 2):
        k, v = torch.randn(2, heads, T, dim), torch.randn(2, heads, T, dim)
        for seq_id in history:
            history[seq_id] = torch.cat([history[seq_id], k[seq_id]], dim=1)
            values[seq_id] = torch.cat([values[seq_id], v[seq_id]], dim=1)
        want_k, want_v = left_padded(list(history.values())), left_padded(list(values.values()))
        for how, store in stores.items():
            cache = ex.PagedLayerCache(store, [0, 1])
            if how == "num_new=None":
                got_k, got_v = cache.update(k, v)
            else:
                got_k, got_v = cache.update(k, v, num_new=torch.full((2,), T, dtype=torch.long))
            label = f"rows of {[h.shape[1] - T for h in history.values()]} cached tokens, {T} new each, {how}"
            for name, got, want in (("keys", got_k, want_k), ("values", got_v, want_v)):
                expect(
                    isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(got, want),
                    f"update returned the wrong {name}",
                    input=label,
                    expected=f"{tuple(want.shape)}: each row's cached and new {name}, zeros on the left",
                    got=f"{tuple(got.shape)}" if isinstance(got, torch.Tensor) else repr(got)[:80],
                    hint="append every row's T new tokens (num_new, KVCache's interface, is T for every row here), "
                    "gather, left-pad to the longest row",
                )
            expect(
                [store.lengths[s] for s in (0, 1)] == [h.shape[1] for h in history.values()],
                "the store's lengths did not advance by T",
                input=label,
                expected=str([h.shape[1] for h in history.values()]),
                got=str([store.lengths[s] for s in (0, 1)]),
                hint="append the T new tokens of every row",
            )


@checks("paged_forward")
@one_thread()
def blocks_follow_lengths(ex):
    """every layer's store holds ceil(L / block_size) blocks per sequence and the right lengths; the keys round-trip"""
    model = ex.make_model(seed=3)
    lengths = [1, 5, 8, 9]
    stores, tokens, _ = prefilled(ex, model, lengths, num_blocks=16, block_size=4)
    ex.paged_forward(model, stores, [0, 1, 2, 3], torch.randint(0, 64, (4, 1)))
    for layer, store in enumerate(stores):
        for seq_id, length in enumerate(lengths):
            held = len(store.block_tables[seq_id])
            expect(
                store.lengths[seq_id] == length + 1 and held == -(-(length + 1) // 4),
                "a sequence's length or block count in a layer's store is wrong",
                input=f"layer {layer}, sequence {seq_id}: prefill {length} tokens + 1 decode, block_size 4",
                expected=f"length {length + 1}, {-(-(length + 1) // 4)} blocks",
                got=f"length {store.lengths[seq_id]}, {held} blocks",
                hint="append exactly the T new tokens of each row to its own sequence, in every layer",
            )
    # the cached keys of layer 0 are the model's own keys at those positions (RoPE applied), recomputed here
    seq_tokens = tokens[2]
    attn = model.layers[0].self_attn
    with torch.no_grad():
        h = model.layers[0].input_layernorm(model.embed_tokens(torch.tensor([seq_tokens])))
        values = attn.v_proj(h).view(1, len(seq_tokens), -1, model.args.head_dim)[0]  # (L, H_kv, D)
    _, cached_values = stores[0].gather(2)
    expect_close(
        cached_values[: len(seq_tokens)],
        values.double(),
        input="layer 0 values of sequence 2 (8 tokens)",
        baseline=values,
        hint="row b of k and v is (H_kv, T, D): transpose to (T, H_kv, D) before append",
    )


@checks("paged_forward")
@one_thread()
def short_pool_refused_before_writing(ex):
    """a pool without the blocks the new tokens need: RuntimeError, and nothing written in any layer"""
    model = ex.make_model(seed=4)
    stores, _, _ = prefilled(ex, model, [4, 2], num_blocks=3, block_size=4)  # 1 + 1 blocks used, 1 free
    before = [
        (dict(s.lengths), {k: list(v) for k, v in s.block_tables.items()}, s.allocator.num_free()) for s in stores
    ]
    expect_refused(
        lambda: ex.paged_forward(model, stores, [1, 0], torch.randint(0, 64, (2, 3))),  # row 0 fits, row 1 needs 2
        input="pool of 3 blocks of 4; rows with 2 and 4 cached tokens, 3 new tokens each (3 blocks needed, 1 free)",
        hint="count every row's new blocks before the forward and raise RuntimeError if the pool is short",
        errors=(RuntimeError,),
    )
    after = [(dict(s.lengths), {k: list(v) for k, v in s.block_tables.items()}, s.allocator.num_free()) for s in stores]
    expect(
        after == before,
        "a refused forward changed the stores",
        input="pool of 3 blocks of 4; rows with 2 and 4 cached tokens, 3 new tokens each",
        expected=str(before[0]),
        got=str(after[0]) if after[0] != before[0] else str(after[-1]),
        hint="the forward appends layer after layer, row after row: check the block count first, then run it",
    )
    try:
        ex.paged_forward(model, stores, [1], torch.randint(0, 64, (1, 3)))  # 2 + 3 tokens: the last free block
    except RuntimeError as error:
        if isinstance(error, NotImplementedError):
            raise
        expect(
            False,
            "a forward that needs exactly the free blocks was refused",
            input="pool of 3 blocks of 4, 1 free; a row with 2 cached tokens gets 3 new ones (1 more block)",
            expected="the forward runs and takes the last block",
            got=f"RuntimeError: {error}",
            hint="refuse only when the blocks needed exceed the free ones (need > free)",
        )


@checks("paged_forward")
def bad_inputs_refused(ex):
    """wrong number of stores, repeated sequence ids, input_ids that is not (B, T): ValueError"""
    model = ex.make_model(seed=5)
    stores = ex.make_stores(model, 8, 4)
    for store in stores:
        store.add_sequence(0)
        store.add_sequence(1)
    expect_value_error(
        lambda: ex.paged_forward(model, stores[:1], [0], torch.tensor([[1, 2]])),
        input="1 store for a 2-layer model",
        hint="one store per layer",
    )
    expect_value_error(
        lambda: ex.paged_forward(model, stores, [0, 0], torch.tensor([[1], [2]])),
        input="seq_ids [0, 0]",
        hint="the seq_ids must be distinct",
    )
    expect_value_error(
        lambda: ex.paged_forward(model, stores, [0, 1], torch.tensor([[1, 2]])),
        input=describe(input_ids=torch.tensor([[1, 2]])) + " for 2 seq_ids",
        hint="input_ids must have one row per sequence id",
    )


# ------------------------------------------------------------------------------------------------ InferenceEngine

_refs: dict = {}


def greedy_references(ex, model, requests):
    key = ("greedy", id(ex.make_model))
    if key not in _refs:
        _refs[key] = (
            ex.make_model,
            {r.request_id: reference_greedy(model, r.prompt, r.max_new_tokens) for r in requests},
        )
    return _refs[key][1]


@checks("InferenceEngine")
@one_thread()
def greedy_trace_equals_generate(ex):
    """greedy outputs of a 12-request trace equal each request decoded alone (full recompute and your generate_greedy)"""
    model = ex.make_model(seed=0)
    requests = fresh_trace(ex)
    expected = greedy_references(ex, model, requests)
    engine = ex.InferenceEngine(model, num_blocks=64, block_size=4, max_num_seqs=4)
    outputs = engine.run(requests)
    compare_outputs(
        outputs,
        expected,
        "decoding it alone by full recomputation",
        TRACE + ", 64 blocks of 4, 4 seqs",
        "decode feeds each running request's last token at its own position; the prefill's last logits "
        "give the first token",
    )
    for r in fresh_trace(ex)[:4]:
        plain = ex.generate_greedy(model, torch.tensor([r.prompt]), max_new_tokens=r.max_new_tokens)[0]
        expect(
            plain[len(r.prompt) :].tolist() == outputs[r.request_id],
            f"request {r.request_id}: the engine's tokens differ from your generate_greedy",
            input=TRACE,
            expected=str(plain[len(r.prompt) :].tolist()),
            got=str(outputs[r.request_id]),
            hint="both decode greedily with the same model: they must agree token for token",
        )


@checks("InferenceEngine")
@one_thread()
def preemption_keeps_outputs(ex):
    """a pool of 8 blocks of 4: requests are preempted and recomputed, outputs still equal, every block returned"""
    model = ex.make_model(seed=0)
    requests = fresh_trace(ex)
    expected = greedy_references(ex, model, requests)
    engine = ex.InferenceEngine(model, num_blocks=8, block_size=4, max_num_seqs=4)
    outputs = engine.run(requests)
    setting = TRACE + ", 8 blocks of 4, 4 seqs"
    compare_outputs(
        outputs,
        expected,
        "decoding it alone",
        setting,
        "a preempted request keeps its output and re-prefills prompt + output when it comes back",
    )
    expect(
        engine.stats["preemptions"] > 0,
        "no request was preempted although the pool cannot hold the running requests",
        input=setting,
        expected="preemptions > 0 (the step of section 4 preempts the newest request when decodes need blocks)",
        got=str(engine.stats),
        hint="before the decode, while the running requests need more blocks than are free, preempt the newest",
    )
    for layer, store in enumerate(engine.stores):
        expect(
            store.allocator.num_free() == 8 and not store.block_tables,
            "blocks are still held after every request finished",
            input=setting,
            expected="8 free blocks and no sequence left in every layer's store",
            got=f"layer {layer}: {store.allocator.num_free()} free, sequences {sorted(store.block_tables)}",
            hint="free_sequence in every store when a request finishes (and when it is preempted)",
        )


@checks("InferenceEngine")
@one_thread()
def sampled_trace_per_request(ex):
    """temperature 0.8 + top-k 10 with per-request seeds: outputs equal each request sampled alone"""
    model = ex.make_model(seed=0)
    requests = fresh_trace(ex, n=8, seed=4)
    processors = [ex.Temperature(0.8), ex.TopK(10)]
    expected = {r.request_id: reference_sampled(ex, model, r, processors) for r in requests}
    engine = ex.InferenceEngine(
        model, num_blocks=10, block_size=4, max_num_seqs=3, processors=processors, do_sample=True
    )
    outputs = engine.run(requests)
    compare_outputs(
        outputs,
        expected,
        "sampling it alone with torch.Generator().manual_seed(request.seed)",
        "8-request trace (make_trace(8, seed=4)), 10 blocks of 4, 3 seqs, Temperature(0.8), TopK(10)",
        "give each request its own generator, seeded with request.seed when it is added, and draw each "
        "of its tokens with it",
    )


@checks("InferenceEngine")
@one_thread()
def scheduling_rules(ex):
    """at most max_num_seqs rows per forward, prefill of a request alone, nothing prefilled before it arrives"""
    model = ex.make_model(seed=0)
    requests = [
        ex.Request(0, [5, 6, 7], 12, arrival=0, seed=1),
        ex.Request(1, [1, 2], 3, arrival=5, seed=2),
        ex.Request(2, [9], 4, arrival=5, seed=3),
        ex.Request(3, [3, 3, 3, 3], 2, arrival=6, seed=4),
    ]
    recorder = Recorder(model)
    try:
        engine = ex.InferenceEngine(model, num_blocks=16, block_size=4, max_num_seqs=2)
        counted_step(engine, recorder)
        engine.run(requests)
    finally:
        recorder.close()
    setting = "requests arriving at steps 0, 5, 5, 6 (prompts 3, 2, 1, 4 tokens), max_num_seqs 2"
    expect(
        max(b for b, _ in recorder.shapes) <= 2,
        "a forward ran more rows than max_num_seqs",
        input=setting,
        expected="every forward with at most 2 rows",
        got=f"forwards of shapes {recorder.shapes}",
        hint="admit only while len(running) < max_num_seqs",
    )
    first = {}
    for step, ids, shape in zip(recorder.step_of_call, recorder.seq_ids, recorder.shapes, strict=True):
        for rid in ids:
            first.setdefault(rid, (step, shape))
    for r in requests:
        step, shape = first.get(r.request_id, (None, None))
        expect(
            step is not None and step >= r.arrival + 1 and shape == (1, len(r.prompt)),
            f"request {r.request_id} was not prefilled alone, after its arrival",
            input=setting,
            expected=f"its first forward: shape (1, {len(r.prompt)}) in step >= {r.arrival + 1}",
            got=f"first forward: shape {shape} in step {step}",
            hint="run() adds a request only when the step counter reaches its arrival; step() prefills each "
            "admitted request in a forward of its own",
        )


def reference_schedule(requests, num_blocks, block_size, max_num_seqs):
    """The step policy of the lesson's section 4 on token counts alone (each step gives each running request one
    token, whatever its value): [(step, [request ids], T)] for every forward, and the number of preemptions."""

    def blocks(n):
        return -(-n // block_size)

    pending = sorted(requests, key=lambda r: r.arrival)
    prompt = {r.request_id: len(r.prompt) for r in requests}
    limit = {r.request_id: r.max_new_tokens for r in requests}
    produced = dict.fromkeys(prompt, 0)
    waiting, running, held = [], [], {}
    free, clock, step, calls, preemptions = num_blocks, 0, 0, [], 0
    while pending or waiting or running:
        while pending and pending[0].arrival <= clock:
            waiting.append(pending.pop(0).request_id)
        clock += 1
        if not waiting and not running:
            continue
        step += 1
        preempted = False
        while running and sum(blocks(prompt[r] + produced[r]) - held[r] for r in running) > free:
            victim = running.pop()
            free += held.pop(victim)
            waiting.insert(0, victim)
            preempted, preemptions = True, preemptions + 1
        if running:
            calls.append((step, list(running), 1))
            for r in running:
                free -= blocks(prompt[r] + produced[r]) - held[r]
                held[r] = blocks(prompt[r] + produced[r])
                produced[r] += 1
        while not preempted and waiting and len(running) < max_num_seqs:
            r = waiting[0]
            if blocks(prompt[r] + produced[r]) > free:
                break
            waiting.pop(0)
            held[r] = blocks(prompt[r] + produced[r])
            free -= held[r]
            calls.append((step, [r], prompt[r] + produced[r]))
            produced[r] += 1
            running.append(r)
        for r in [r for r in running if produced[r] >= limit[r]]:
            free += held.pop(r)
            running.remove(r)
    return calls, preemptions


@checks("InferenceEngine")
@one_thread()
def schedule_follows_the_policy(ex):
    """step by step, the forwards (which requests, how many tokens) and the stats equal the policy of section 4"""
    model = ex.make_model(seed=0)
    requests = fresh_trace(ex)
    late = ex.Request(12, [4, 5, 6], 3, arrival=requests[-1].arrival + 40, seed=7)  # arrives after an idle stretch
    requests.append(late)
    want, preemptions = reference_schedule(requests, 8, 4, 3)
    recorder = Recorder(model)
    try:
        engine = ex.InferenceEngine(model, num_blocks=8, block_size=4, max_num_seqs=3)
        counted_step(engine, recorder)
        engine.run(requests)
    finally:
        recorder.close()
    got = [
        (step, ids, shape[1])
        for step, ids, shape in zip(recorder.step_of_call, recorder.seq_ids, recorder.shapes, strict=True)
    ]
    setting = "13 requests (the 12-request trace + one arriving after an idle stretch), 8 blocks of 4, 3 seqs"
    for index, (g, w) in enumerate(zip(got, want, strict=False)):
        expect(
            g == w,
            f"forward {index + 1} differs from the policy",
            input=setting,
            expected=f"(step, request ids, new tokens per row) = {w}",
            got=f"{g}; previous forwards agree",
            hint="per step: preempt the newest while the decodes lack blocks; decode all running requests at once; "
            "admit (not after a preemption) while seats and blocks allow; retire; idle steps call no step()",
        )
    expect(
        len(got) == len(want),
        "the number of forwards differs from the policy",
        input=setting,
        expected=f"{len(want)} forwards",
        got=f"{len(got)} forwards",
        hint="one decode forward per step for the running requests, one prefill forward per admitted request",
    )
    stats = {
        "steps": recorder.step,
        "forward_calls": len(got),
        "token_slots": sum(b * t for b, t in recorder.shapes),
        "preemptions": preemptions,
    }
    expect(
        {key: engine.stats.get(key) for key in stats} == stats,
        "the engine's stats disagree with what it did",
        input=setting,
        expected=str(stats),
        got=str(engine.stats),
        hint="count every step, every forward and its B * T token slots, and every preemption once",
    )


@checks("InferenceEngine")
@one_thread()
def fewer_token_slots_and_forwards(ex):
    """counted by a hook: token slots <= 1/1.3 of naive static batching's, forwards <= 1/2 of one request at a time"""
    model = ex.make_model(seed=0)
    requests = fresh_trace(ex)
    naive = naive_slots(requests, 4)
    recorder = Recorder(model)
    try:
        ex.InferenceEngine(model, num_blocks=64, block_size=4, max_num_seqs=4).run(requests)
    finally:
        recorder.close()
    slots = sum(b * t for b, t in recorder.shapes)
    expect(
        slots > 0 and naive / slots >= SLOT_RATIO,
        "the engine computed too many token slots",
        input=TRACE + ", 64 blocks of 4, max_num_seqs 4",
        expected=f"naive {naive} / engine slots >= {SLOT_RATIO}",
        got=f"engine {slots} slots in {len(recorder.shapes)} forwards (ratio {naive / max(slots, 1):.2f})",
        hint="decode feeds only each running request's last token (B, 1); prefill a request once, without padding",
    )
    one_at_a_time = sum(r.max_new_tokens for r in requests)  # a prefill and max_new - 1 decodes per request
    calls = len(recorder.shapes)
    expect(
        one_at_a_time / calls >= CALL_RATIO,
        "the engine ran too many forwards: the running requests are not decoded together",
        input=TRACE + ", 64 blocks of 4, max_num_seqs 4",
        expected=f"one request at a time ({one_at_a_time} forwards) / engine forwards >= {CALL_RATIO}",
        got=f"{calls} forwards (ratio {one_at_a_time / calls:.2f})",
        hint="one paged_forward of (B, 1) tokens for all running requests per step, not one per request",
    )


@checks("InferenceEngine")
def bad_requests_refused(ex):
    """a duplicate id, an empty prompt, max_new_tokens < 1, a request larger than the pool: ValueError"""
    model = ex.make_model(seed=0)
    engine = ex.InferenceEngine(model, num_blocks=4, block_size=4, max_num_seqs=2)
    engine.add(ex.Request(0, [1, 2], 3))
    expect_value_error(
        lambda: engine.add(ex.Request(0, [3], 2)),
        input="request id 0 added twice",
        hint="refuse an id that was already added",
    )
    expect_value_error(lambda: engine.add(ex.Request(1, [], 2)), input="empty prompt", hint="refuse an empty prompt")
    expect_value_error(
        lambda: engine.add(ex.Request(2, [1], 0)), input="max_new_tokens 0", hint="refuse max_new_tokens < 1"
    )
    expect_value_error(
        lambda: engine.add(ex.Request(3, list(range(10)), 7)),
        input="prompt 10 + max_new_tokens 7 = 17 tokens, pool of 4 blocks of 4",
        hint="refuse a request needing more than num_blocks blocks: it could never run",
    )
    for request, what in (
        (
            ex.Request(4, list(range(10)), 6),
            "prompt 10 + max_new_tokens 6 = 16 tokens: exactly the pool of 4 blocks of 4",
        ),
        (ex.Request(5, [7], 1), "a one-token prompt and max_new_tokens 1"),
    ):
        try:
            engine.add(request)
        except ValueError as error:
            expect(
                False,
                "a valid request was refused",
                input=what,
                expected="accepted",
                got=f"ValueError: {error}",
                hint="refuse only max_new_tokens < 1 and requests needing more than num_blocks blocks",
            )
