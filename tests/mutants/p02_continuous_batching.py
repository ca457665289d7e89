"""Realistic wrong versions of the p02.continuous_batching solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "scheduler",
        "no_chunked_prefill",
        "gives a waiting request its whole prompt regardless of the budget",
        [
            (
                "request = self.waiting[0]\n            n = min(len(request.tokens) - request.num_computed, budget)",
                "request = self.waiting[0]\n            n = len(request.tokens) - request.num_computed",
            )
        ],
    ),
    Mutant(
        "scheduler",
        "preempted_keeps_progress",
        "a preempted request keeps num_computed although its KV blocks are gone",
        [("victim.num_computed = 0\n", "")],
    ),
    Mutant(
        "scheduler",
        "preempted_to_the_back",
        "puts the preempted request at the back of the waiting queue",
        [("self.waiting.appendleft(victim)", "self.waiting.append(victim)")],
    ),
    Mutant(
        "scheduler",
        "preempts_the_oldest",
        "preempts the oldest running request instead of the newest",
        [("victim = self.running.pop()", "victim = self.running.pop(0)")],
    ),
    Mutant(
        "scheduler",
        "admits_after_preemption",
        "admits waiting requests in a step that preempted",
        [("while self.waiting and budget > 0 and not preempted and", "while self.waiting and budget > 0 and")],
    ),
    Mutant(
        "scheduler",
        "samples_after_partial_chunk",
        "appends a token after every step, even one that stopped in the middle of the prompt",
        [("if request.num_computed == len(request.tokens):\n", "if request.request_id in sampled:\n")],
    ),
    Mutant(
        "scheduler",
        "finished_keep_blocks",
        "finished requests leave the running list but keep their blocks",
        [("del self.blocks_held[request.request_id]\n                finished.append", "finished.append")],
    ),
    Mutant(
        "scheduler",
        "no_pool_check_on_add",
        "accepts a request that can never fit the pool",
        [("if need > self.num_blocks:", "if False:")],
    ),
    Mutant(
        "run_engine",
        "samples_every_planned",
        "calls the model for every planned request, partial prefill chunks included",
        [("if by_id[rid].num_computed + n == len(by_id[rid].tokens)\n", "")],
    ),
    Mutant(
        "run_engine",
        "samples_after_update",
        "samples from the tokens of the previous step's state: asks the model before the plan's chunk is counted",
        [
            (
                "rid: next_token(by_id[rid].tokens)",
                "rid: next_token(by_id[rid].tokens[:-1] or by_id[rid].tokens)",
            )
        ],
    ),
    Mutant(
        "run_engine",
        "trace_only_nonempty_outputs",
        "records only the steps in which some request finished",
        [("trace.append(plan)", "trace.append(plan) if any(r.finished for r in by_id.values()) else None")],
    ),
]
