"""Checks for p02.continuous_batching. References: a reference scheduler written independently here (request state
in plain dicts and lists, the policy of the lesson's section 2) whose per-step plans, preemption counts and outputs
must be equal; invariants checked after every step (token budget, pool, batch cap, block accounting, preempted
requests reset, the oldest running request planned at every step); sequential generation of each request alone
(token for token); a hand-computed three-step trace."""

import random

from llm_algo.check import Checks, expect, expect_value_error

checks = Checks("p02.continuous_batching")


def toy_model(tokens):
    """Stands for greedy decoding: a deterministic next token that depends on every token and on the position."""
    value = len(tokens)
    for t in tokens:
        value = (value * 1000003 + t) % 1000000007
    return value % 50


def sequential(prompt, max_new):
    tokens = list(prompt)
    for _ in range(max_new):
        tokens.append(toy_model(tokens))
    return tokens[len(prompt) :]


def reference_run(specs, num_blocks, block_size, budget, max_seqs):
    """specs: [(request_id, prompt, max_new)]. Returns (plans, outputs, preemptions)."""
    prompt = {rid: list(p) for rid, p, _ in specs}
    limit = {rid: m for rid, _, m in specs}
    out = {rid: [] for rid, _, _ in specs}
    done = dict.fromkeys(prompt, 0)
    waiting, running, held = [rid for rid, _, _ in specs], [], {}
    plans, finished, preemptions = [], {}, 0

    def blocks(n):
        return (n + block_size - 1) // block_size

    while waiting or running:
        plan, left, preempted = {}, budget, False
        i = 0
        while i < len(running) and left > 0:
            rid = running[i]
            n = min(len(prompt[rid]) + len(out[rid]) - done[rid], left)
            want = blocks(done[rid] + n)
            while want - held[rid] > num_blocks - sum(held.values()):
                victim = running.pop()
                del held[victim]
                done[victim] = 0
                waiting.insert(0, victim)
                preempted, preemptions = True, preemptions + 1
                if victim == rid:
                    break
            if rid not in running:
                break
            held[rid], plan[rid], left, i = want, n, left - n, i + 1
        while not preempted and waiting and left > 0 and len(running) < max_seqs:
            rid = waiting[0]
            n = min(len(prompt[rid]) + len(out[rid]) - done[rid], left)
            if blocks(done[rid] + n) > num_blocks - sum(held.values()):
                break
            waiting.pop(0)
            running.append(rid)
            held[rid], plan[rid], left = blocks(done[rid] + n), n, left - n
        for rid, n in plan.items():
            done[rid] += n
            if done[rid] == len(prompt[rid]) + len(out[rid]):
                out[rid].append(toy_model(prompt[rid] + out[rid]))
            if len(out[rid]) >= limit[rid]:
                running.remove(rid)
                del held[rid]
                finished[rid] = out[rid]
        plans.append(plan)
    return plans, finished, preemptions


def random_specs(rng, count, max_prompt, max_new):
    return [
        (rid, [rng.randrange(50) for _ in range(rng.randint(1, max_prompt))], rng.randint(1, max_new))
        for rid in range(count)
    ]


CONFIGS = [  # (seed, count, max_prompt, max_new, num_blocks, block_size, budget, max_seqs): tight pools preempt
    (1, 8, 12, 6, 40, 4, 16, 4),
    (2, 10, 20, 8, 9, 4, 8, 6),
    (3, 12, 9, 12, 7, 3, 5, 8),
    (4, 6, 30, 3, 12, 8, 64, 2),
    (5, 8, 3, 6, 60, 2, 3, 6),  # more running decodes than the budget: the newest wait their turn
]


def drive(ex, specs, num_blocks, block_size, budget, max_seqs, on_step=None):
    """Run the learner's Scheduler with the toy model; returns (plans, outputs, preemptions)."""
    scheduler = ex.Scheduler(num_blocks, block_size, budget, max_seqs)
    requests = {rid: ex.Request(rid, list(p), m) for rid, p, m in specs}
    for rid, _, _ in specs:
        scheduler.add(requests[rid])
    plans, outputs = [], {}
    for _ in range(5000):
        if not (scheduler.running or scheduler.waiting):
            break
        before = [r.request_id for r in scheduler.running]
        plan = dict(scheduler.schedule())
        # the model returns a token for every planned request, as a batched forward does; only those whose chunk
        # reaches the end of their known tokens may be kept (the others are read off the middle of a prompt)
        sampled = {rid: toy_model(requests[rid].tokens[: requests[rid].num_computed + n]) for rid, n in plan.items()}
        for request in scheduler.update(plan, sampled):
            outputs[request.request_id] = list(request.output)
        plans.append(plan)
        if on_step:
            on_step(scheduler, plan, before, requests)
        if not plan:
            break
    return plans, outputs, scheduler.num_preemptions


def config_label(cfg):
    seed, count, max_prompt, max_new, num_blocks, block_size, budget, max_seqs = cfg
    return (
        f"{count} random requests (prompts <= {max_prompt}, <= {max_new} new; seed {seed}), {num_blocks} blocks of "
        f"{block_size}, token_budget {budget}, max_num_seqs {max_seqs}"
    )


def first_difference(got, want):
    for step, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return step, g, w
    return min(len(got), len(want)), got[len(want) :][:1], want[len(got) :][:1]


# ------------------------------------------------------------------------------------------ scheduler


@checks("scheduler")
def three_steps_by_hand(ex):
    """budget 8, blocks of 4: a 10-token prompt is chunked 8 + 2; a 3-token prompt joins in step 2; both decode"""
    specs = [(0, list(range(10)), 2), (1, [7, 8, 9], 2)]
    plans, outputs, _ = drive(ex, specs, 10, 4, 8, 4)
    want = [{0: 8}, {0: 2, 1: 3}, {0: 1, 1: 1}]
    expect(
        plans == want,
        "the step plans differ",
        input="prompts of 10 and 3 tokens, 2 new tokens each; 10 blocks of 4; token_budget 8",
        expected=str(want),
        got=str(plans),
        hint="running requests first, n = min(remaining, budget); then waiting ones while the budget lasts",
    )
    expect(
        outputs == {0: sequential(range(10), 2), 1: sequential([7, 8, 9], 2)},
        "outputs differ from sequential generation",
        input="the same two requests",
        expected=str({0: sequential(range(10), 2), 1: sequential([7, 8, 9], 2)}),
        got=str(outputs),
        hint="append the sampled token only when num_computed reaches len(tokens)",
    )


@checks("scheduler")
def plans_match_the_reference_scheduler(ex):
    """random workloads, with chunking and preemptions: every step's plan, the outputs and the preemption count"""
    for cfg in CONFIGS:
        seed, count, max_prompt, max_new, num_blocks, block_size, budget, max_seqs = cfg
        specs = random_specs(random.Random(seed), count, max_prompt, max_new)
        got_plans, got_out, got_pre = drive(ex, specs, num_blocks, block_size, budget, max_seqs)
        want_plans, want_out, want_pre = reference_run(specs, num_blocks, block_size, budget, max_seqs)
        step, got, want = first_difference(got_plans, want_plans)
        expect(
            got_plans == want_plans,
            f"the plan of step {step} differs from the reference scheduler",
            input=config_label(cfg),
            expected=str(want),
            got=str(got),
            hint="preempt from the end of the running list to the front of waiting; admit no one in a step that "
            "preempted; stop admitting when the pool cannot hold the next request's blocks",
        )
        expect(
            got_pre == want_pre,
            "num_preemptions differs",
            input=config_label(cfg),
            expected=str(want_pre),
            got=str(got_pre),
        )
        expect(got_out == want_out, "outputs differ", input=config_label(cfg), expected=str(want_out), got=str(got_out))


@checks("scheduler")
def invariants_after_every_step(ex):
    """budget, pool and batch cap never exceeded; blocks = ceil(computed / bs); preempted requests reset; the oldest
    running request is planned at every step"""
    problems = []

    def on_step(scheduler, plan, before, requests):
        if problems:
            return
        bs = scheduler.block_size
        if sum(plan.values()) > scheduler.token_budget or any(n < 1 for n in plan.values()):
            problems.append(f"plan {plan}: over the budget {scheduler.token_budget} or a count < 1")
        if len(scheduler.running) > scheduler.max_num_seqs:
            problems.append(f"{len(scheduler.running)} running > max_num_seqs {scheduler.max_num_seqs}")
        if sum(scheduler.blocks_held.values()) > scheduler.num_blocks:
            problems.append(f"{sum(scheduler.blocks_held.values())} blocks held > pool {scheduler.num_blocks}")
        for request in scheduler.running:
            want = -(-request.num_computed // bs)
            if scheduler.blocks_held.get(request.request_id) != want:
                problems.append(
                    f"request {request.request_id}: {request.num_computed} tokens computed, holds "
                    f"{scheduler.blocks_held.get(request.request_id)} blocks, expected ceil(/{bs}) = {want}"
                )
        for request in scheduler.waiting:
            if request.num_computed or request.request_id in scheduler.blocks_held:
                problems.append(f"waiting request {request.request_id} keeps computed tokens or blocks")
        if before and before[0] not in plan:
            problems.append(f"the oldest running request {before[0]} got nothing in plan {plan}")
        for rid in plan:
            request = requests[rid]
            if request.num_computed > len(request.tokens):
                problems.append(f"request {rid} computed past its known tokens")

    for cfg in CONFIGS:
        seed, count, max_prompt, max_new, num_blocks, block_size, budget, max_seqs = cfg
        specs = random_specs(random.Random(100 + seed), count, max_prompt, max_new)
        plans, outputs, _ = drive(ex, specs, num_blocks, block_size, budget, max_seqs, on_step)
        expect(
            not problems,
            "a scheduler invariant broke",
            input=config_label(cfg),
            expected="budget, pool, batch cap and block accounting kept; the oldest request progresses",
            got=problems[0] if problems else "",
            hint="a preempted request frees its blocks, restarts at num_computed 0 and waits at the front",
        )
        expect(
            len(outputs) == count,
            "not every request finished",
            input=config_label(cfg),
            expected=f"{count} finished",
            got=f"{len(outputs)} after {len(plans)} steps",
            hint="finished requests free their blocks and leave the running list",
        )


@checks("scheduler")
def refuses_bad_requests(ex):
    """ValueError: a duplicate id, an empty prompt, max_new_tokens < 1, a request larger than the pool"""
    scheduler = ex.Scheduler(4, 4, 16, 4)
    scheduler.add(ex.Request(1, [1, 2, 3], 2))
    expect_value_error(lambda: scheduler.add(ex.Request(1, [5], 1)), "request id 1 twice", "ids are unique")
    expect_value_error(lambda: scheduler.add(ex.Request(2, [], 3)), "an empty prompt", "a request needs a prompt")
    expect_value_error(lambda: scheduler.add(ex.Request(3, [1], 0)), "max_new_tokens 0", "max_new_tokens >= 1")
    expect_value_error(
        lambda: scheduler.add(ex.Request(4, list(range(14)), 3)),
        "14 + 3 tokens, a pool of 4 blocks of 4",
        "ceil((prompt + max_new_tokens) / block_size) blocks must fit the pool, or the request can never run",
    )
    ok = ex.Request(5, list(range(13)), 3)
    scheduler.add(ok)
    expect(
        len(scheduler.waiting) == 2,
        "the refused requests must not be queued (and 13 + 3 = 16 tokens exactly fit)",
        input="after the refusals, add a request of 13 + 3 tokens",
        expected="2 waiting",
        got=f"{len(scheduler.waiting)} waiting",
    )


# ------------------------------------------------------------------------------------------ run_engine


def engine_specs(cfg):
    seed, count, max_prompt, max_new, *_ = cfg
    return random_specs(random.Random(200 + seed), count, max_prompt, max_new)


@checks("run_engine")
def outputs_equal_sequential_generation(ex):
    """tight pools (preemption by recompute) and small budgets (chunked prefill): outputs token for token"""
    for cfg in CONFIGS:
        *_, num_blocks, block_size, budget, max_seqs = cfg
        specs = engine_specs(cfg)
        requests = [ex.Request(rid, list(p), m) for rid, p, m in specs]
        outputs, _ = ex.run_engine(requests, toy_model, num_blocks, block_size, budget, max_seqs)
        want = {rid: sequential(p, m) for rid, p, m in specs}
        wrong = [rid for rid in want if outputs.get(rid) != want[rid]]
        expect(
            not wrong,
            "outputs differ from generating each request alone",
            input=config_label(cfg),
            expected=f"request {wrong[:1]}: {[want[r] for r in wrong[:1]]}",
            got=str([outputs.get(r) for r in wrong[:1]]),
            hint="sample with next_token(request.tokens) only for requests whose step reaches their last token",
        )


@checks("run_engine")
def trace_matches_the_reference(ex):
    """the list of plans returned equals the reference scheduler's, one per step"""
    for cfg in CONFIGS[1:3]:
        *_, num_blocks, block_size, budget, max_seqs = cfg
        specs = engine_specs(cfg)
        _, trace = ex.run_engine(
            [ex.Request(r, list(p), m) for r, p, m in specs], toy_model, num_blocks, block_size, budget, max_seqs
        )
        want, _, _ = reference_run(specs, num_blocks, block_size, budget, max_seqs)
        step, got, expected = first_difference(list(trace), want)
        expect(
            list(trace) == want,
            f"the trace differs at step {step}",
            input=config_label(cfg),
            expected=str(expected),
            got=str(got),
            hint="record every step's plan, in order",
        )


@checks("run_engine")
def samples_only_at_the_end_of_known_tokens(ex):
    """the model is called once per generated token (never after a partial prefill chunk), with full sequences"""
    cfg = CONFIGS[2]
    *_, num_blocks, block_size, budget, max_seqs = cfg
    specs = engine_specs(cfg)
    calls = []

    def counting_model(tokens):
        calls.append(tuple(tokens))
        return toy_model(tokens)

    outputs, _ = ex.run_engine(
        [ex.Request(r, list(p), m) for r, p, m in specs], counting_model, num_blocks, block_size, budget, max_seqs
    )
    full = {tuple(p) + tuple(sequential(p, m)[:k]) for _, p, m in specs for k in range(m)}
    generated = sum(len(o) for o in outputs.values())
    expect(
        len(calls) == generated and set(calls) <= full,
        "the model was called for a step that did not reach the end of a sequence",
        input=config_label(cfg),
        expected=f"{generated} calls, each on prompt + outputs so far",
        got=f"{len(calls)} calls, {len(set(calls) - full)} on other token lists",
        hint="sample only when num_computed + n == len(request.tokens)",
    )
