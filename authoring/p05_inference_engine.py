"""Source of 05_Projects/02_Inference_Engine.ipynb (build with `python -m llm_algo build p05.inference_engine`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p05.inference_engine",
        path="05_Projects/02_Inference_Engine.ipynb",
        title_en="Project: a mini inference engine",
        title_zh="项目：一个迷你推理引擎",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p02.tiny_llama", "p02.paged_attention", "p02.continuous_batching", "p02.sampling"],
    )
    lesson.title(
        intro=r"""
        A serving engine such as vLLM is three ideas around a model: a **paged KV cache** (memory in fixed-size
        blocks handed out on demand, `p02.paged_attention`), **continuous batching** (the batch is re-formed at every
        step: finished requests leave, waiting ones join, `p02.continuous_batching`) and **sampling** per request
        (`p02.sampling`). Kwon et al. (2023, *Efficient Memory Management for Large Language Model Serving with
        PagedAttention*, SOSP) measured 2 to 4 times the throughput of FasterTransformer and Orca at the same latency
        from the first two, because paging wastes under 4% of the KV memory where reserving each request's maximum
        length wasted 60 to 80%, so more requests fit in a batch.

        **You will assemble** those pieces around your own tiny Llama (`p02.tiny_llama`): your `PagedKVCache`
        (one per layer) becomes the model's cache through a small adapter, and an engine with a request queue admits,
        preempts, prefills, decodes in batches and retires requests, sampling each one with your
        `sample_next_token` and its own seeded generator. **Graded on outcomes**, with thresholds stated below: on a
        trace of requests with mixed lengths arriving over time, greedy outputs equal your plain `generate_greedy`
        token for token for every request, also when the block pool is so small that requests are preempted;
        sampled outputs equal a per-request reference under the same seeds; every block is back in the pool at the
        end; and, counted by a hook on your model (not by the engine's own bookkeeping), the token slots it computes
        are at most 1/1.3 of what naive static batching computes on the same trace, and its forward calls at most
        half of what decoding one request at a time needs.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **推理引擎 = 分页 KV cache（paged KV cache）+ 连续批处理（continuous batching）+ 逐请求采样**；vLLM 靠前两者比 Orca 等系统吞吐高 2~4 倍。
        - **适配器**：模型的注意力层只认 `KVCache` 接口（`update(k, v)` 返回全部 K/V），`PagedLayerCache` 把新 token 写进该层的 `PagedKVCache`，再按块表读回，左填充（left padding）到同一长度。
        - **位置与掩码**：第 $b$ 条序列已缓存 $L_b$ 个 token，新 token 的位置是 $L_b, L_b+1, \dots$；掩码标出每行最后 $L_b+T$ 个真实位置。左填充才能让右下对齐的因果掩码在 $T>1$ 时仍然正确。
        - **调度一步**：先为正在解码的请求留块（不够就抢占最新的请求：释放它的块，放回等待队列最前面，之后重算 prefill）；没有抢占时按到达顺序接纳新请求并单独 prefill；其余请求一次批量 decode；完成的请求释放块。
        - **采样**：每个请求有自己的 `torch.Generator`，所以结果与批次组成无关，可以逐请求复现。
        - **评分**：greedy 输出与 `generate_greedy` 逐 token 相同（包括发生抢占时）；固定种子的采样与逐请求参考一致；结束时所有块归还；计算的 token 槽数不超过静态批处理的 1/1.3，前向调用次数不超过逐个请求解码的 1/2。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: a server's requests do not come in tidy batches

        Requests arrive over time with prompts and answers of every length. A naive server collects `max_num_seqs` of
        them, left-pads the prompts to the longest, and decodes until the longest answer is done: every padded
        prompt slot and every slot of a request that already finished is computed for nothing, and a request that
        arrives just after a batch started waits for the whole batch. The Orca paper (Yu et al., OSDI 2022)
        replaced that with *iteration-level scheduling*: the batch is re-formed at every decode step. It needs a KV
        cache that can grow and shrink per request without copying, which is what paging gives: each request holds
        a list of block ids (its **block table**), and a block of `block_size` positions is taken from the pool only
        when the request's length crosses a block boundary.

        | what | naive static batching | this engine |
        | --- | --- | --- |
        | prompt | left-padded to the batch's longest, one prefill for the batch | one prefill per request, no padding |
        | decode | all `B` rows until the longest answer ends | only the running requests, one token each |
        | new request | waits for the batch to end | joins at the next step if a seat and blocks are free |
        | KV memory | `B × (prompt + max answer)` reserved | $\lceil L / bs \rceil$ blocks per request, returned when it ends |
        | out of memory | cannot happen (reserved) or crashes | preempt the newest request, recompute it later |

        ## 2. The adapter: your Llama on a paged cache

        Your `TinyLlama.forward(input_ids, attention_mask, position_ids, caches)` hands each layer's attention a
        `cache` and only calls `k_all, v_all = cache.update(k, v)` on it (and reads `caches[0].length`). So the paged
        cache enters the model through an object with that interface, one per layer, built for the sequences of the
        current forward:

        - `update(k, v)` gets the new keys and values of the batch, `(B, H_kv, T, D)` (rotated already: RoPE is
          applied before the cache). Row $b$ belongs to sequence `seq_ids[b]`: append its `T` tokens to that
          sequence in the layer's `PagedKVCache` (`append` wants `(T, H_kv, D)`), then read the sequence back
          (`gather`: `(L_b + T, H_kv, D)`).
        - The rows have different lengths. Return them **left-padded** with zeros to $S = \max_b L_b + T$: keys and
          values `(B, H_kv, S, D)`, row $b$'s real positions the last $L_b + T$.
        - The forward passes `attention_mask (B, S)`, True at each row's last $L_b + T$ positions, and
          `position_ids (B, T)` $= L_b + (0, 1, \dots, T - 1)$: each sequence's own positions, not the batch's.

        Why left padding? Your attention's causal mask is bottom-right aligned: new query $i$ may see keys
        $j \le S - T + i$. With left padding, row $b$'s query $i$ sits at key index $S - T + i$, which is exactly its
        own position in the padded row, so it sees its own past and nothing of its own future. With right padding a
        shorter row's query $i$ would also see that row's later new tokens whenever $T > 1$. In decode ($T = 1$)
        both would work; the checks also run $T = 2$ on sequences of different lengths (what speculative
        verification of a batch needs).

        A real engine does not gather: its attention kernel reads the blocks through the block table
        (`paged_decode_attention` in `p02.paged_attention`, vLLM's `paged_attention` kernels, FlashAttention's
        `block_table=`). Gathering costs a copy of each sequence's KV per layer and step; it keeps your attention
        layer unchanged, which is the point of this project.
    """)
    lesson.setup(r"""
        import time
        from collections import deque
        from dataclasses import dataclass, field
        from types import SimpleNamespace

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F

        # Your building blocks from the earlier lessons (the reference where yours does not pass its checks yet)
        TinyLlama, generate_greedy = lesson.use("p02.tiny_llama", "TinyLlama", "generate_greedy")
        PagedKVCache = lesson.use("p02.paged_attention", "PagedKVCache")
        Temperature, TopK, sample_next_token = lesson.use("p02.sampling", "Temperature", "TopK", "sample_next_token")


        def make_model(seed: int = 0, n_layers: int = 2):
            '''A tiny Llama with random weights; the head is scaled so that next-token distributions are peaked.'''
            torch.manual_seed(seed)
            args = SimpleNamespace(dim=32, n_layers=n_layers, n_heads=4, n_kv_heads=2, head_dim=8, hidden_dim=64,
                                   vocab_size=64, norm_eps=1e-6, rope_theta=10000.0, tie_embeddings=False)
            model = TinyLlama(args).eval()
            with torch.no_grad():
                model.lm_head.weight.mul_(4.0)
            return model


        def make_stores(model, num_blocks: int, block_size: int):
            '''One PagedKVCache per layer; the engine does the same operations on all of them, so their block
            tables stay identical (vLLM also shares one block table across layers, each layer with its own tensors).'''
            a = model.args
            dtype = model.lm_head.weight.dtype
            return [PagedKVCache(num_blocks, block_size, a.n_kv_heads, a.head_dim, dtype=dtype) for _ in model.layers]


        @dataclass
        class Request:
            request_id: int
            prompt: list                # token ids
            max_new_tokens: int
            arrival: int = 0            # the engine step at which the request arrives
            seed: int = 0               # the seed of its own sampling generator
            output: list = field(default_factory=list)

            @property
            def tokens(self):
                return self.prompt + self.output

            @property
            def finished(self):
                return len(self.output) >= self.max_new_tokens


        def make_trace(num_requests: int, seed: int = 0, vocab_size: int = 64):
            '''Requests with prompts of 2 to 14 tokens, answers of 2 to 16, arriving 0 to 2 steps apart.'''
            g = torch.Generator().manual_seed(seed)
            requests, arrival = [], 0
            for i in range(num_requests):
                prompt_len = int(torch.randint(2, 15, (), generator=g))
                answer_len = int(torch.randint(2, 17, (), generator=g))
                prompt = torch.randint(0, vocab_size, (prompt_len,), generator=g).tolist()
                requests.append(Request(i, prompt, answer_len, arrival=arrival, seed=1000 + i))
                arrival += int(torch.randint(0, 3, (), generator=g))
            return requests
    """)
    lesson.md(r"""
        ## 3. Exercise `paged_forward`

        Write the adapter `PagedLayerCache` of section 2 and `paged_forward`, one forward of your model over a batch
        of sequences that live in the paged stores (one `PagedKVCache` per layer; every sequence already added with
        `add_sequence`, possibly empty). Every sequence gets the same number $T \ge 1$ of new tokens. Before the
        forward, refuse with `ValueError` a number of stores other than the model's layers, `seq_ids` that are not
        `B` distinct ids, and `input_ids` that is not `(B, T)`; raise `RuntimeError` **before anything is written**
        when the pool does not have the blocks that the new tokens need (count them: the forward writes in every
        layer, so a failure half-way would leave the layers disagreeing). Return the logits `(B, T, V)`.
    """)
    lesson.exercise(
        "paged_forward",
        r'''
        class PagedLayerCache:
            """One layer's view of a batch of sequences in its PagedKVCache, with KVCache's interface."""

            def __init__(self, store, seq_ids):
                self.store, self.seq_ids = store, list(seq_ids)
                self.length = max(store.lengths[s] for s in self.seq_ids)  # cached positions before this forward

            def update(self, k, v, num_new=None):
                """k, v: (B, H_kv, T, D) new keys/values of row b = sequence seq_ids[b].
                Appends them to the store; returns every row's keys and values, left-padded: (B, H_kv, S, D) each."""
                # TODO: per row: append (T, H_kv, D) to its sequence, gather it back, transpose to (H_kv, L_b + T, D)
                # TODO: left-pad every row with zeros to the longest and stack
                ### BEGIN SOLUTION
                keys, values = [], []
                for b, seq_id in enumerate(self.seq_ids):
                    self.store.append(seq_id, k[b].transpose(0, 1), v[b].transpose(0, 1))  # (T, H_kv, D)
                    k_b, v_b = self.store.gather(seq_id)                                  # (L_b + T, H_kv, D)
                    keys.append(k_b.transpose(0, 1))                                      # (H_kv, L_b + T, D)
                    values.append(v_b.transpose(0, 1))
                S = max(x.shape[1] for x in keys)
                keys = torch.stack([F.pad(x, (0, 0, S - x.shape[1], 0)) for x in keys])      # (B, H_kv, S, D)
                values = torch.stack([F.pad(x, (0, 0, S - x.shape[1], 0)) for x in values])
                return keys, values
                ### END SOLUTION


        @torch.no_grad()
        def paged_forward(model, stores, seq_ids, input_ids):
            """model: TinyLlama; stores: one PagedKVCache per layer; seq_ids: B sequence ids in the stores;
            input_ids: (B, T) int64, T new tokens per sequence. Appends their K/V; returns logits (B, T, V)."""
            # TODO: validate (ValueError); lengths L_b of the sequences (B,)
            # TODO: count the blocks the new tokens need; RuntimeError before any write if the pool is short
            # TODO: mask (B, S) True at each row's last L_b + T positions; position_ids L_b + arange(T)
            # TODO: one PagedLayerCache per layer; the model's forward
            ### BEGIN SOLUTION
            if len(stores) != len(model.layers):
                raise ValueError(f"{len(stores)} stores for a model of {len(model.layers)} layers")
            if len(set(seq_ids)) != len(seq_ids) or input_ids.dim() != 2 or input_ids.shape[0] != len(seq_ids):
                raise ValueError(f"need B distinct seq_ids and input_ids (B, T); got {list(seq_ids)} and "
                                 f"{tuple(input_ids.shape)}")
            B, T = input_ids.shape
            store = stores[0]
            lengths = torch.tensor([store.lengths[s] for s in seq_ids])                  # (B,) cached tokens
            need = sum(-(-(int(L) + T) // store.block_size) - len(store.block_tables[s])
                       for s, L in zip(seq_ids, lengths))
            if need > store.allocator.num_free():
                raise RuntimeError(f"the new tokens need {need} blocks, {store.allocator.num_free()} are free")
            S = int(lengths.max()) + T
            mask = torch.arange(S)[None, :] >= (S - lengths - T)[:, None]                # (B, S) left-padded
            position_ids = lengths[:, None] + torch.arange(T)[None, :]                   # (B, T)
            caches = [PagedLayerCache(layer_store, seq_ids) for layer_store in stores]
            return model(input_ids, attention_mask=mask, position_ids=position_ids, caches=caches)  # (B, T, V)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks prefill sequences of different lengths one at a time, decode them together, and compare every
        logit with a full forward of each sequence alone (no cache) by the package's tolerance policy; run $T = 2$
        on sequences of different cached lengths; count each sequence's blocks ($\lceil L / bs \rceil$ in every
        layer); and refuse a short pool without writing anything, and the bad inputs above.

        ## 4. The engine's step

        The engine keeps a `waiting` queue (first come, first served, preempted requests at its front) and a
        `running` list (in admission order). A request that has produced $n$ tokens has $P + n - 1$ positions in
        the cache: its last sampled token has not been fed yet. One `step()`:

        1. **Room for the decodes.** Feeding every running request's last token needs
           $\sum_r \lceil (P_r + n_r) / bs\rceil - |\text{table}_r|$ new blocks. While that exceeds the free blocks,
           **preempt** the newest running request: free its blocks in every store, put it at the front of
           `waiting`, count it. It keeps its output; when it comes back, its prefill recomputes `prompt + output`
           (preemption by recompute, vLLM's default).
        2. **Decode** the remaining running requests in **one** `paged_forward` of `(B, 1)` tokens, and sample one
           token for each.
        3. **Admit** (only in a step that preempted nobody, to avoid admitting what the next step would evict):
           while a seat is free (`len(running) < max_num_seqs`) and the head of `waiting` has the blocks for all its
           tokens, add its sequence to the stores, **prefill** it alone (`(1, P + n)`, no padding), sample its next
           token from the last position, and append it to `running`.
        4. **Retire** the finished requests: free their blocks, drop their sequences, return them.

        Sampling: each request gets a `torch.Generator` seeded with its `seed` when it is added, and every token
        of that request is drawn with it through `sample_next_token(tokens (1, n), logits (1, V), processors,
        generator, do_sample)`. Its tokens then do not depend on which other requests share its batches, which is
        what makes a sampled trace reproducible per request (vLLM's per-request `seed` in `SamplingParams`).

        `run(requests)` adds each request when the step counter reaches its `arrival`, and steps until everything
        is done (an idle step, with nothing arrived yet, only advances the counter); it returns
        `{request_id: output tokens}`. It raises `RuntimeError` if a step with work to do ran no forward. `add`
        refuses with `ValueError` a duplicate id, an empty prompt, `max_new_tokens < 1`, and a request that could
        never fit: $\lceil (P + \text{max\_new\_tokens}) / bs \rceil$ blocks more than the pool.

        `stats` counts `steps`, `forward_calls`, `token_slots` ($\sum B \cdot T$ over the forwards: the work the
        model did) and `preemptions`.
    """)
    lesson.exercise(
        "InferenceEngine",
        r'''
        class InferenceEngine:
            """Continuous batching over a paged KV cache, around a TinyLlama."""

            def __init__(self, model, num_blocks: int, block_size: int, max_num_seqs: int, processors=(),
                         do_sample: bool = False):
                if min(num_blocks, block_size, max_num_seqs) < 1:
                    raise ValueError("num_blocks, block_size and max_num_seqs must all be >= 1")
                self.model, self.num_blocks, self.block_size = model, num_blocks, block_size
                self.max_num_seqs, self.processors, self.do_sample = max_num_seqs, list(processors), do_sample
                self.stores = make_stores(model, num_blocks, block_size)
                self.waiting: deque = deque()   # Requests not running, first come first served
                self.running: list = []         # admitted Requests, in admission order
                self.generators: dict = {}      # request_id -> torch.Generator
                self.stats = {"steps": 0, "forward_calls": 0, "token_slots": 0, "preemptions": 0}

            def free_blocks(self) -> int:
                return self.stores[0].allocator.num_free()

            def blocks_for(self, num_tokens: int) -> int:
                return -(-num_tokens // self.block_size)

            def add(self, request):
                # TODO: validate (ValueError), give it its own seeded generator, queue it
                ### BEGIN SOLUTION
                if request.request_id in self.generators:
                    raise ValueError(f"request id {request.request_id} was already added")
                if not request.prompt or request.max_new_tokens < 1:
                    raise ValueError(f"request {request.request_id} needs a prompt and max_new_tokens >= 1")
                need = self.blocks_for(len(request.prompt) + request.max_new_tokens)
                if need > self.num_blocks:
                    raise ValueError(f"request {request.request_id} needs {need} blocks, the pool has {self.num_blocks}")
                self.generators[request.request_id] = torch.Generator().manual_seed(request.seed)
                self.waiting.append(request)
                ### END SOLUTION

            def _forward(self, seq_ids, input_ids):
                self.stats["forward_calls"] += 1
                self.stats["token_slots"] += input_ids.numel()
                return paged_forward(self.model, self.stores, seq_ids, input_ids)

            def _sample(self, request, logits):
                """Append one token drawn from logits (V,) with the request's own generator."""
                token = sample_next_token(torch.tensor([request.tokens]), logits[None], self.processors,
                                          generator=self.generators[request.request_id], do_sample=self.do_sample)
                request.output.append(int(token[0]))

            def _release(self, request):
                for store in self.stores:
                    store.free_sequence(request.request_id)

            def step(self) -> list:
                """One iteration: room for the decodes (preempting), batched decode, admission + prefill, retire.
                Returns the requests that finished in this step."""
                # TODO: 1. while the running requests' decode needs more blocks than are free: preempt the newest
                # TODO: 2. one batched decode of every running request's last token; sample each
                # TODO: 3. if nobody was preempted: admit + prefill while seats and blocks allow; sample each
                # TODO: 4. retire finished requests (free their blocks)
                ### BEGIN SOLUTION
                self.stats["steps"] += 1
                store = self.stores[0]

                def decode_need(requests):
                    return sum(self.blocks_for(len(r.tokens)) - len(store.block_tables[r.request_id]) for r in requests)

                preempted = False
                while self.running and decode_need(self.running) > self.free_blocks():
                    victim = self.running.pop()                  # the newest request
                    self._release(victim)                        # its KV is gone; its output stays
                    self.waiting.appendleft(victim)
                    self.stats["preemptions"] += 1
                    preempted = True
                if self.running:
                    ids = [r.request_id for r in self.running]
                    last = torch.tensor([[r.tokens[-1]] for r in self.running])               # (B, 1)
                    logits = self._forward(ids, last)                                         # (B, 1, V)
                    for b, request in enumerate(self.running):
                        self._sample(request, logits[b, -1])
                while (not preempted and self.waiting and len(self.running) < self.max_num_seqs
                       and self.blocks_for(len(self.waiting[0].tokens)) <= self.free_blocks()):
                    request = self.waiting.popleft()
                    for layer_store in self.stores:
                        layer_store.add_sequence(request.request_id)
                    logits = self._forward([request.request_id], torch.tensor([request.tokens]))  # (1, P + n, V)
                    self._sample(request, logits[0, -1])
                    self.running.append(request)
                finished = [r for r in self.running if r.finished]
                for request in finished:
                    self._release(request)
                    self.running.remove(request)
                return finished
                ### END SOLUTION

            def run(self, requests) -> dict:
                """Add each request at its arrival step; step until all are done. Returns {request_id: output}."""
                # TODO: pending requests by arrival; loop: add the arrived ones, step (or idle), collect outputs;
                #       RuntimeError if a step with work ran no forward
                ### BEGIN SOLUTION
                pending = deque(sorted(requests, key=lambda r: r.arrival))  # stable: ties keep the given order
                outputs, clock = {}, 0
                while pending or self.waiting or self.running:
                    while pending and pending[0].arrival <= clock:
                        self.add(pending.popleft())
                    clock += 1
                    if not (self.waiting or self.running):
                        continue                                   # idle: nothing has arrived yet
                    calls = self.stats["forward_calls"]
                    for request in self.step():
                        outputs[request.request_id] = list(request.output)
                    if self.stats["forward_calls"] == calls:
                        raise RuntimeError(f"no progress: {len(self.waiting)} waiting, {len(self.running)} running")
                return outputs
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks run a 12-request trace through your engine and compare every output with plain greedy decoding
        of that request alone (the checks' own loop, full recomputation, and your `generate_greedy`); run it again
        with a pool of 8 blocks of 4 tokens, where requests must be preempted; sample with temperature and top-k
        under per-request seeds against a per-request reference; check that every block is free at the end and
        that no forward ran more than `max_num_seqs` rows; replay the policy of section 4 on token counts alone and
        compare it, forward by forward (step, requests, tokens per row), with what your engine ran, and your
        `stats` with what a hook saw; count the token slots the model computed with a forward
        hook and compare them with naive static batching (naive / engine $\ge$ **1.3**; the reference solution
        measures 268 / 167 = 1.60), count the forwards against decoding one request at a time (a prefill and
        $n - 1$ decodes each: ratio $\ge$ **2**; the reference solution measures 101 / 43 = 2.35); and refuse bad
        requests.

        ### Throughput: the engine against naive batched generate

        Naive static batching takes the requests in arrival order, `max_num_seqs` at a time, left-pads the prompts
        and runs your `generate_greedy` for the batch's longest answer. Token slots of one batch of $B$ requests:
        $B \cdot \max P$ for the prefill plus $B \cdot (\max n - 1)$ for the decodes. The cell below counts both on
        a trace of 48 requests and also times them on this CPU.
    """)
    lesson.code(r"""
        def naive_slots(requests, batch):
            total = 0
            for start in range(0, len(requests), batch):
                group = requests[start : start + batch]
                longest_prompt = max(len(r.prompt) for r in group)
                longest_answer = max(r.max_new_tokens for r in group)
                total += len(group) * (longest_prompt + longest_answer - 1)
            return total


        def naive_generate(model, requests, batch):
            outputs = {}
            for start in range(0, len(requests), batch):
                group = requests[start : start + batch]
                width = max(len(r.prompt) for r in group)
                ids = torch.zeros(len(group), width, dtype=torch.long)
                mask = torch.zeros(len(group), width, dtype=torch.bool)
                for i, r in enumerate(group):
                    ids[i, width - len(r.prompt):] = torch.tensor(r.prompt)
                    mask[i, width - len(r.prompt):] = True
                out = generate_greedy(model, ids, mask, max_new_tokens=max(r.max_new_tokens for r in group))
                for i, r in enumerate(group):
                    outputs[r.request_id] = out[i, width : width + r.max_new_tokens].tolist()
            return outputs


        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny matrices: one thread beats two on a busy CPU (restored below)
        model = make_model()
        rows = []
        try:
            for batch in (2, 4, 8):
                trace = make_trace(48, seed=1)
                generated = sum(r.max_new_tokens for r in trace)
                start = time.perf_counter()
                naive = naive_generate(model, trace, batch)
                naive_s = time.perf_counter() - start
                engine = InferenceEngine(model, num_blocks=64, block_size=4, max_num_seqs=batch)
                start = time.perf_counter()
                outputs = engine.run(trace)
                engine_s = time.perf_counter() - start
                same = sum(outputs[i] == naive[i] for i in outputs)
                rows.append((batch, naive_slots(trace, batch), engine.stats["token_slots"], generated / naive_s,
                             generated / engine_s, engine.stats["preemptions"]))
                print(f"max_num_seqs={batch}: token slots naive {rows[-1][1]}, engine {rows[-1][2]} "
                      f"(x{rows[-1][1] / rows[-1][2]:.2f}); tokens/s on this CPU naive {rows[-1][3]:.0f}, "
                      f"engine {rows[-1][4]:.0f}; preemptions {rows[-1][5]}; outputs equal for {same}/48 requests")
        except NotImplementedError:
            print("paged_forward and InferenceEngine first")
        torch.set_num_threads(threads)
        if rows:
            xs = range(len(rows))
            fig, axes = plt.subplots(1, 2, figsize=(10, 3.3))
            axes[0].bar([x - 0.2 for x in xs], [r[1] for r in rows], width=0.4, label="naive static batching")
            axes[0].bar([x + 0.2 for x in xs], [r[2] for r in rows], width=0.4, label="your engine")
            axes[0].set_ylabel("token slots computed"); axes[0].legend(fontsize=8)
            axes[1].bar([x - 0.2 for x in xs], [r[3] for r in rows], width=0.4, label="naive static batching")
            axes[1].bar([x + 0.2 for x in xs], [r[4] for r in rows], width=0.4, label="your engine")
            axes[1].set_ylabel("generated tokens / s (this CPU)"); axes[1].legend(fontsize=8)
            for ax in axes:
                ax.set_xticks(list(xs)); ax.set_xticklabels([f"max {r[0]} seqs" for r in rows])
            axes[0].set_title("48 requests: work (hardware-independent)"); axes[1].set_title("48 requests: wall time")
            plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ### Reading the numbers

        The left panel is the work: the engine computes no padded prompt slot and no slot of a finished request,
        so its token slots are the prompts plus the answers (plus any recomputed prefills after preemption), and
        the gap to static batching grows with the batch, because a bigger batch waits for a longer longest answer.
        The right panel is wall time on this CPU, where the comparison is not fair to either side: at hidden size
        32 a forward costs mostly Python and kernel-launch overhead, whatever its size, and the engine adds its
        per-sequence `append`/`gather` in Python for every layer. On a GPU the decode step of a real model is
        bound by reading the weights once per step (`p02.continuous_batching`, section 1), so the number of steps
        and the rows kept busy per step decide throughput, and the paged kernel reads the blocks in place.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`PagedLayerCache.update`.** `k[b]` is `(H_kv, T, D)`; `PagedKVCache` stores tokens first, hence the
        transposes both ways. `F.pad(x, (0, 0, S - L, 0))` pads the second-to-last axis (positions) on the left and
        leaves `D` alone. The zeros it adds are never attended (the mask), but they must be there: the rows must
        stack into one tensor.

        **`paged_forward`.** Three numbers per row decide correctness: the cached length $L_b$ (from the store, not
        the batch), the positions $L_b, \dots, L_b + T - 1$ (RoPE of a token at the wrong position still gives
        finite, plausible logits: only a comparison catches it), and the mask of the last $L_b + T$ columns. The
        block count comes *before* the forward: `PagedKVCache.append` is all-or-nothing per call, but the forward
        appends layer after layer and row after row, so the engine must know that every one of those appends will
        succeed.

        **`step`.** Decoding before admission, and preempting before decoding, makes the accounting simple: the
        decodes' blocks are secured first, the leftovers go to new requests, and a newly admitted request never
        decodes in the step of its prefill (its prefill already produced its token). The victim is the *newest*
        running request: the oldest always progresses, so nothing starves. A preempted request keeps its output and
        re-prefills `prompt + output`; re-prefilling the prompt alone would append the old output's tokens again
        after new ones. Greedy outputs are then identical to decoding each request alone, whatever the batch and the
        memory pressure, which is what the checks assert.

        **The usual mistakes, and why they are wrong**: positions from the
        batch's longest sequence, no mask (padding attended), right padding (wrong for $T > 1$), no block count
        before the forward; finished requests that keep their blocks, a preempted request whose output is forgotten
        or recomputed from the prompt only, every generator seeded alike, a decode of one request per forward,
        admission past `max_num_seqs`, requests admitted before they arrive.

        **In production.** vLLM V1's scheduler plans a token budget per step and mixes chunked prefills with decodes
        in one forward (`p02.continuous_batching`), where this engine runs each prefill alone; its model runner turns
        the block tables into a `slot_mapping` and writes the new keys of the whole batch with one
        `reshape_and_cache` kernel, then attends through the block tables without copying; prefix caching shares
        full blocks between requests with the same prefix (`p02.prefix_cache`); CUDA graphs replay decode steps of
        fixed batch sizes to remove the launch overhead that dominates this CPU demo. SGLang and TensorRT-LLM
        ("in-flight batching") follow the same plan.
    """)
    lesson.mistakes()
    return lesson
