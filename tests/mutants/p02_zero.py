"""Realistic wrong versions of the p02.zero solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "zero_memory_per_rank",
        "stage_two_gradients_kept",
        "stage 2 still divides only the optimizer state (gradients not sharded)",
        [("if stage >= 2:", "if stage >= 3:")],
    ),
    Mutant(
        "zero_memory_per_rank",
        "stage_three_weights_kept",
        "stage 3 forgets to shard the weights",
        [("weights /= world_size", "weights /= 1")],
    ),
    Mutant(
        "zero_memory_per_rank",
        "fixed_optimizer_bytes",
        "hard-codes 12 bytes of optimizer state per parameter",
        [("optimizer_bytes * num_params", "12 * num_params")],
    ),
    Mutant(
        "zero1",
        "no_average",
        "all-reduces the sum of the gradients without dividing by the world size",
        [
            (
                "return flat[self.start : self.start + self.shard_size].div_(self.world_size)",
                "return flat[self.start : self.start + self.shard_size]",
            )
        ],
    ),
    Mutant(
        "zero1",
        "no_padding",
        "shard size numel // world_size: with an odd number of elements the last one belongs to no shard",
        [("self.shard_size = -(-self.numel // self.world_size)", "self.shard_size = self.numel // self.world_size")],
    ),
    Mutant(
        "zero1",
        "offset_without_padding",
        "starts rank r's shard at r * numel // world_size: shards overlap when the buffer is padded",
        [("self.start = self.rank * self.shard_size", "self.start = self.rank * self.numel // self.world_size")],
    ),
    Mutant(
        "zero1",
        "no_all_gather",
        "copies back only its own updated shard: the other ranks' updates never arrive",
        [
            (
                "all_gather(full, self.shard.detach(), group=self.group)",
                "full = self._flat([p.detach() for p in self.params])\n"
                "        full[self.start : self.start + self.shard_size] = self.shard.detach()",
            ),
        ],
    ),
    Mutant(
        "zero1",
        "optimizer_on_full_parameters",
        "creates the optimizer over the full parameters (every rank keeps all of the state) and steps them all",
        [
            (
                "self.optimizer = optimizer_class([self.shard], **optimizer_kwargs)  # state for S elements only",
                "self.shard = nn.Parameter(flat.clone())\n"
                "        self.optimizer = optimizer_class([self.shard], **optimizer_kwargs)\n"
                "        self.start, self.full_shard = 0, True",
            ),
            (
                "return flat[self.start : self.start + self.shard_size].div_(self.world_size)",
                "return flat.div_(self.world_size) if getattr(self, 'full_shard', False) else "
                "flat[self.start : self.start + self.shard_size].div_(self.world_size)",
            ),
            ("all_gather(full, self.shard.detach(), group=self.group)", "full = self.shard.detach()"),
        ],
    ),
    Mutant(
        "zero2",
        "calls_all_reduce",
        "all-reduces the full gradient and slices it, as in stage 1",
        [
            (
                "reduce_scatter(shard, flat, group=self.group)",
                "dist.all_reduce(flat, group=self.group)\n"
                "        shard = flat[self.start : self.start + self.shard_size].clone()",
            )
        ],
    ),
    Mutant(
        "zero2",
        "no_average",
        "reduce-scatters the sum and forgets to divide by the world size",
        [("return shard.div_(self.world_size)", "return shard")],
    ),
    Mutant(
        "zero2",
        "gradients_kept",
        "keeps the full local gradients: no memory saved over stage 1",
        [("p.grad = None  # from here on", "pass  # from here on")],
    ),
]
