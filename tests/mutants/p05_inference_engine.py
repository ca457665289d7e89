"""Realistic wrong versions of the p05.inference_engine solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "paged_forward",
        "positions_from_batch",
        "gives every row the positions of the batch's longest sequence instead of its own cached length",
        [
            (
                "position_ids = lengths[:, None] + torch.arange(T)[None, :]",
                "position_ids = (int(lengths.max()) + torch.arange(T))[None, :].expand(B, T)",
            )
        ],
        mistake_zh="给每一行都用 batch 中最长序列的位置，而不是该行自己已缓存的长度",
    ),
    Mutant(
        "paged_forward",
        "no_padding_mask",
        "passes an all-True mask: shorter rows attend to their padding",
        [
            (
                "mask = torch.arange(S)[None, :] >= (S - lengths - T)[:, None]",
                "mask = torch.ones(B, S, dtype=torch.bool)",
            )
        ],
        mistake_zh="传入全 True 的掩码：较短的行会注意到自己的填充位置",
    ),
    Mutant(
        "paged_forward",
        "right_padding",
        "pads shorter rows on the right: with T > 1 the bottom-right causal mask then lets a row see its own future",
        [
            (
                "keys = torch.stack([F.pad(x, (0, 0, S - x.shape[1], 0)) for x in keys])",
                "keys = torch.stack([F.pad(x, (0, 0, 0, S - x.shape[1])) for x in keys])",
            ),
            (
                "values = torch.stack([F.pad(x, (0, 0, S - x.shape[1], 0)) for x in values])",
                "values = torch.stack([F.pad(x, (0, 0, 0, S - x.shape[1])) for x in values])",
            ),
            (
                "mask = torch.arange(S)[None, :] >= (S - lengths - T)[:, None]",
                "mask = torch.arange(S)[None, :] < (lengths + T)[:, None]",
            ),
        ],
        mistake_zh="在右侧填充较短的行：T > 1 时右下对齐的因果掩码会让该行看到自己的未来",
    ),
    Mutant(
        "paged_forward",
        "no_block_count",
        "runs the forward without counting the blocks first: a short pool fails half-way, after some rows were written",
        [("if need > store.allocator.num_free():", "if False:")],
        mistake_zh="前向之前没有先统计所需的块数：块池不够时在中途失败，此时部分行已经写入",
    ),
    Mutant(
        "paged_forward",
        "values_not_transposed",
        "appends k[b] and v[b] as (H_kv, T, D) reshaped instead of transposed to (T, H_kv, D)",
        [
            (
                "self.store.append(seq_id, k[b].transpose(0, 1), v[b].transpose(0, 1))",
                "self.store.append(seq_id, k[b].reshape(-1, k.shape[1], k.shape[3]), "
                "v[b].reshape(-1, v.shape[1], v.shape[3]))",
            )
        ],
        mistake_zh="追加 k[b] 和 v[b] 时把 (H_kv, T, D) 直接 reshape，而不是转置成 (T, H_kv, D)",
    ),
    Mutant(
        "InferenceEngine",
        "blocks_not_freed",
        "retires finished requests without freeing their blocks (a leak)",
        [("self._release(request)\n            self.running.remove(request)", "self.running.remove(request)")],
        mistake_zh="结束的请求退出时没有释放它们的块（内存泄漏）",
    ),
    Mutant(
        "InferenceEngine",
        "never_preempts",
        "decodes without making room first: never preempts when the pool is short",
        [("while self.running and decode_need(self.running) > self.free_blocks():", "while False:")],
        mistake_zh="解码前没有先腾出空间：块池不够时从不抢占",
    ),
    Mutant(
        "InferenceEngine",
        "recompute_prompt_only",
        "re-prefills a preempted request from its prompt only, forgetting the tokens it already produced",
        [
            (
                "logits = self._forward([request.request_id], torch.tensor([request.tokens]))",
                "logits = self._forward([request.request_id], torch.tensor([request.prompt]))",
            )
        ],
        mistake_zh="被抢占的请求只用提示词重新预填充，丢掉了已经生成的 token",
    ),
    Mutant(
        "InferenceEngine",
        "one_seed_for_all",
        "seeds every request's generator with the same number instead of the request's own seed",
        [("torch.Generator().manual_seed(request.seed)", "torch.Generator().manual_seed(0)")],
        mistake_zh="每个请求的生成器都用同一个种子，而不是该请求自己的 seed",
    ),
    Mutant(
        "InferenceEngine",
        "no_seat_limit",
        "admits requests without checking max_num_seqs",
        [("and len(self.running) < self.max_num_seqs", "")],
        mistake_zh="接纳请求时不检查 max_num_seqs",
    ),
    Mutant(
        "InferenceEngine",
        "ignores_arrivals",
        "adds every request at the start instead of at its arrival step",
        [("while pending and pending[0].arrival <= clock:", "while pending:")],
        mistake_zh="一开始就加入所有请求，而不是在各自到达的步骤加入",
    ),
    Mutant(
        "InferenceEngine",
        "decode_one_by_one",
        "decodes the running requests one forward each instead of in one batched forward",
        [
            (
                "logits = self._forward(ids, last)                                         # (B, 1, V)\n"
                "            for b, request in enumerate(self.running):\n"
                "                self._sample(request, logits[b, -1])",
                "for b, request in enumerate(self.running):\n"
                "                logits = self._forward([ids[b]], last[b : b + 1])\n"
                "                self._sample(request, logits[0, -1])",
            )
        ],
        mistake_zh="对运行中的请求逐个前向解码，而不是合成一次批量前向",
    ),
    Mutant(
        "paged_forward",
        "update_without_num_new",
        "drops KVCache's num_new parameter from PagedLayerCache.update, so a caller that passes it fails",
        [("def update(self, k, v, num_new=None):", "def update(self, k, v):")],
        mistake_zh="PagedLayerCache.update 去掉了 KVCache 接口的 num_new 参数，传入它的调用方会出错",
    ),
]
