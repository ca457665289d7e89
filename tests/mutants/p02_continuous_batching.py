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
        mistake_zh="不管预算多少，都把整个提示交给等待中的请求",
    ),
    Mutant(
        "scheduler",
        "preempted_keeps_progress",
        "a preempted request keeps num_computed although its KV blocks are gone",
        [("victim.num_computed = 0\n", "")],
        mistake_zh="被抢占的请求保留了 num_computed，可它的 KV 块已经没了",
    ),
    Mutant(
        "scheduler",
        "preempted_to_the_back",
        "puts the preempted request at the back of the waiting queue",
        [("self.waiting.appendleft(victim)", "self.waiting.append(victim)")],
        mistake_zh="把被抢占的请求放到等待队列末尾",
    ),
    Mutant(
        "scheduler",
        "preempts_the_oldest",
        "preempts the oldest running request instead of the newest",
        [("victim = self.running.pop()", "victim = self.running.pop(0)")],
        mistake_zh="抢占最早运行的请求，而不是最新的",
    ),
    Mutant(
        "scheduler",
        "admits_after_preemption",
        "admits waiting requests in a step that preempted",
        [("while self.waiting and budget > 0 and not preempted and", "while self.waiting and budget > 0 and")],
        mistake_zh="在发生了抢占的一步里仍然接纳等待中的请求",
    ),
    Mutant(
        "scheduler",
        "samples_after_partial_chunk",
        "appends a token after every step, even one that stopped in the middle of the prompt",
        [("if request.num_computed == len(request.tokens):\n", "if request.request_id in sampled:\n")],
        mistake_zh="每一步之后都追加一个 token，即使这一步停在了提示中间",
    ),
    Mutant(
        "scheduler",
        "finished_keep_blocks",
        "finished requests leave the running list but keep their blocks",
        [("del self.blocks_held[request.request_id]\n                finished.append", "finished.append")],
        mistake_zh="完成的请求离开了运行列表，却仍然占着它的块",
    ),
    Mutant(
        "scheduler",
        "no_pool_check_on_add",
        "accepts a request that can never fit the pool",
        [("if need > self.num_blocks:", "if False:")],
        mistake_zh="接受一个永远装不进块池的请求",
    ),
    Mutant(
        "run_engine",
        "samples_every_planned",
        "calls the model for every planned request, partial prefill chunks included",
        [("if by_id[rid].num_computed + n == len(by_id[rid].tokens)\n", "")],
        mistake_zh="对每个计划中的请求都调用模型，包括只预填充了一部分的块",
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
        mistake_zh="从上一步状态的 token 采样：在计划的块计入之前就询问模型",
    ),
    Mutant(
        "run_engine",
        "trace_only_nonempty_outputs",
        "records only the steps in which some request finished",
        [("trace.append(plan)", "trace.append(plan) if any(r.finished for r in by_id.values()) else None")],
        mistake_zh="只记录有请求完成的那些步",
    ),
]
