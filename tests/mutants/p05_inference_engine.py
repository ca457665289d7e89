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
    ),
    Mutant(
        "paged_forward",
        "no_block_count",
        "runs the forward without counting the blocks first: a short pool fails half-way, after some rows were written",
        [("if need > store.allocator.num_free():", "if False:")],
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
    ),
    Mutant(
        "InferenceEngine",
        "blocks_not_freed",
        "retires finished requests without freeing their blocks (a leak)",
        [("self._release(request)\n            self.running.remove(request)", "self.running.remove(request)")],
    ),
    Mutant(
        "InferenceEngine",
        "never_preempts",
        "decodes without making room first: never preempts when the pool is short",
        [("while self.running and decode_need(self.running) > self.free_blocks():", "while False:")],
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
    ),
    Mutant(
        "InferenceEngine",
        "one_seed_for_all",
        "seeds every request's generator with the same number instead of the request's own seed",
        [("torch.Generator().manual_seed(request.seed)", "torch.Generator().manual_seed(0)")],
    ),
    Mutant(
        "InferenceEngine",
        "no_seat_limit",
        "admits requests without checking max_num_seqs",
        [("and len(self.running) < self.max_num_seqs", "")],
    ),
    Mutant(
        "InferenceEngine",
        "ignores_arrivals",
        "adds every request at the start instead of at its arrival step",
        [("while pending and pending[0].arrival <= clock:", "while pending:")],
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
    ),
    Mutant(
        "paged_forward",
        "update_without_num_new",
        "drops KVCache's num_new parameter from PagedLayerCache.update, so a caller that passes it fails",
        [("def update(self, k, v, num_new=None):", "def update(self, k, v):")],
        mistake_zh="PagedLayerCache.update 去掉了 KVCache 接口的 num_new 参数，传入它的调用方会出错",
    ),
]
