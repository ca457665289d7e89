"""Realistic wrong versions of the p04.cuda_graphs solution; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # ----- pad_batch
    Mutant(
        "pad_batch",
        "strict_bucket_comparison",
        "picks the smallest bucket strictly larger than the batch (> for >=): a batch of 8 runs in the graph for 16",
        [("fitting = [b for b in buckets if b >= batch]", "fitting = [b for b in buckets if b > batch]")],
        mistake_zh="选严格大于批大小的最小桶（> 代替 >=）：8 的批跑在 16 的图里",
    ),
    Mutant(
        "pad_batch",
        "largest_bucket_for_overflow",
        "falls back to the largest bucket for a batch that does not fit, silently dropping the extra sequences",
        [("    if not fitting:\n        raise", "    if not fitting:\n        return max(buckets)\n        raise")],
        mistake_zh="装不下的批退回到最大的桶，默默丢掉多出的序列",
    ),
    Mutant(
        "pad_batch",
        "first_bucket_not_smallest",
        "takes the first bucket in list order that holds the batch, assuming the list is sorted",
        [("    return min(fitting)", "    return fitting[0]")],
        mistake_zh="按列表顺序取第一个装得下的桶，假定列表是排好序的",
    ),
    Mutant(
        "pad_batch",
        "padding_rows_in_slot_zero",
        "pads the slots with zeros, so that the padding rows write their keys and values into slot 0, a live sequence",
        [("padded_slots = slots.new_full((size,), pad_slot)", "padded_slots = slots.new_zeros(size)")],
        mistake_zh="槽位用零填充，填充行把它们的 key 和 value 写进槽位 0，那是一个活跃的序列",
    ),
    Mutant(
        "pad_batch",
        "uninitialised_padding_positions",
        "allocates the padded positions with torch.empty: the padding rows index the cache at whatever was in memory",
        [("padded_positions = positions.new_zeros(size)", "padded_positions = positions.new_empty(size).fill_(-7)")],
        mistake_zh="用 torch.empty 分配填充的位置：填充行按内存里残留的值索引缓存",
    ),
    # ----- StaticDecodeStep
    Mutant(
        "StaticDecodeStep",
        "position_as_python_int",
        "reads the position of each row with int() and writes the cache at that Python index (a sync; baked in at "
        "capture)",
        [
            (
                "            self.k_cache[layer, self.slots, :, self.positions] = k               # index_put_, (B, H, hd)\n"
                "            self.v_cache[layer, self.slots, :, self.positions] = v\n",
                "            for b in range(B):\n"
                "                p, s = int(self.positions[b]), int(self.slots[b])\n"
                "                self.k_cache[layer, s, :, p] = k[b]\n"
                "                self.v_cache[layer, s, :, p] = v[b]\n",
            )
        ],
        mistake_zh="用 int() 读每行的位置，按这个 Python 下标写缓存（一次同步；捕获时被固化）",
    ),
    Mutant(
        "StaticDecodeStep",
        "python_step_counter",
        "keeps the position as a Python counter incremented by step(), the same for every row",
        [
            (
                "        visible = self.key_index[None, :] <= self.positions[:, None]             # (B, T_max)\n",
                "        self.counter = getattr(self, 'counter', -1) + 1\n"
                "        position = torch.full_like(self.positions, self.counter)\n"
                "        visible = self.key_index[None, :] <= position[:, None]             # (B, T_max)\n",
            ),
            (
                "self.k_cache[layer, self.slots, :, self.positions] = k",
                "self.k_cache[layer, self.slots, :, position] = k",
            ),
            (
                "self.v_cache[layer, self.slots, :, self.positions] = v",
                "self.v_cache[layer, self.slots, :, position] = v",
            ),
        ],
        mistake_zh="位置用一个由 step() 递增的 Python 计数器保存，每一行都一样",
    ),
    Mutant(
        "StaticDecodeStep",
        "inputs_rebound",
        "rebinds the static inputs to the new tensors (self.x = new) instead of copying into them: a graph keeps "
        "reading the old buffers",
        [
            (
                "        self.token_ids.copy_(token_ids)\n"
                "        self.positions.copy_(positions)\n"
                "        self.slots.copy_(slots)\n",
                "        self.token_ids = token_ids.to(self.token_ids.device, torch.long)\n"
                "        self.positions = positions.to(self.positions.device, torch.long)\n"
                "        self.slots = slots.to(self.slots.device, torch.long)\n",
            )
        ],
        mistake_zh="把静态输入重新绑定到新张量（self.x = new）而不是拷贝进去：图一直读旧的缓冲区",
    ),
    Mutant(
        "StaticDecodeStep",
        "fresh_logits",
        "returns freshly allocated logits and keeps them in self.logits instead of writing into the static buffer",
        [
            (
                "        self.logits.copy_(rms_norm(x, m.final_norm) @ m.embed.T)",
                "        self.logits = rms_norm(x, m.final_norm) @ m.embed.T",
            )
        ],
        mistake_zh="返回新分配的 logits 并存进 self.logits，而不是写入静态缓冲区",
    ),
    Mutant(
        "StaticDecodeStep",
        "current_token_masked",
        "masks the current position too (< for <=): the new token does not attend to itself",
        [
            (
                "visible = self.key_index[None, :] <= self.positions[:, None]",
                "visible = self.key_index[None, :] < self.positions[:, None]",
            )
        ],
        mistake_zh="当前位置也被屏蔽（< 代替 <=）：新 token 不关注自己",
    ),
    Mutant(
        "StaticDecodeStep",
        "sliced_attention_with_item",
        "slices the keys to the longest position read with .item() (a CPU sync, and a new shape every step)",
        [
            (
                "            keys = self.k_cache[layer, self.slots]                                # (B, H, T_max, hd)\n"
                "            values = self.v_cache[layer, self.slots]\n",
                "            length = int(self.positions.max().item()) + 1\n"
                "            keys = self.k_cache[layer, self.slots, :, :length]\n"
                "            values = self.v_cache[layer, self.slots, :, :length]\n",
            ),
            (
                'scores = scores.masked_fill(~visible[:, None, :], float("-inf"))',
                'scores = scores.masked_fill(~visible[:, None, :length], float("-inf"))',
            ),
        ],
        mistake_zh="用 .item() 读出最长位置来切 key（一次 CPU 同步，每一步形状都不同）",
    ),
    Mutant(
        "StaticDecodeStep",
        "length_computed_in_set_inputs",
        "computes the attended length as a Python int in set_inputs (no sync inside step) and slices the cache to it: "
        "right eagerly, but a graph keeps the length of the step it was captured at",
        [
            (
                "        self.slots.copy_(slots)\n",
                "        self.slots.copy_(slots)\n        self.length = int(positions.max()) + 1\n",
            ),
            (
                "            keys = self.k_cache[layer, self.slots]                                # (B, H, T_max, hd)\n"
                "            values = self.v_cache[layer, self.slots]\n",
                "            keys = self.k_cache[layer, self.slots, :, : self.length]\n"
                "            values = self.v_cache[layer, self.slots, :, : self.length]\n",
            ),
            (
                'scores = scores.masked_fill(~visible[:, None, :], float("-inf"))',
                'scores = scores.masked_fill(~visible[:, None, : self.length], float("-inf"))',
            ),
        ],
        mistake_zh="在 set_inputs 里把关注长度算成 Python int（step 里没有同步）并以此切缓存：eager 下正确，图却保留了捕获那一步的长度",
    ),
    Mutant(
        "StaticDecodeStep",
        "cache_copy_written",
        "writes the new keys into a copy of the cache (torch.index_put, not in place) and keeps the copy",
        [
            (
                "            self.k_cache[layer, self.slots, :, self.positions] = k               # index_put_, (B, H, hd)\n",
                "            self.k_cache = self.k_cache.index_put((torch.full((B, H), layer), self.slots[:, None].expand(B, H), "
                "torch.arange(H)[None, :].expand(B, H), self.positions[:, None].expand(B, H)), k)\n",
            )
        ],
        mistake_zh="把新的 key 写进缓存的副本（torch.index_put，不是原地）并保留副本",
    ),
    Mutant(
        "StaticDecodeStep",
        "no_validation",
        "copies the inputs without validating them (out-of-range positions index outside the cache in a replay)",
        [
            (
                "            if bool((values < 0).any()) or bool((values >= high).any()):\n"
                '                raise ValueError(f"{name} must lie in [0, {high}), got {values.tolist()}")\n',
                "",
            )
        ],
        mistake_zh="拷贝输入时不做检查（越界的位置在重放时索引到缓存之外）",
    ),
    # ----- GraphedDecoder
    Mutant(
        "GraphedDecoder",
        "no_scratch_slot",
        "allocates exactly num_slots slots and pads into slot 0: the padding rows overwrite a live sequence",
        [
            (
                "self.model, self.buckets, self.pad_slot = model, sorted(set(buckets)), num_slots",
                "self.model, self.buckets, self.pad_slot = model, sorted(set(buckets)), 0",
            ),
            ("allocate_kv_cache(model, num_slots + 1)", "allocate_kv_cache(model, num_slots)"),
        ],
        mistake_zh="恰好分配 num_slots 个槽位，填充到槽位 0：填充行覆盖了一个活跃的序列",
    ),
    Mutant(
        "GraphedDecoder",
        "view_of_static_logits",
        "returns a view of the static logits: the next call overwrites the result the caller kept",
        [("        return step.logits[:batch].clone()", "        return step.logits[:batch]")],
        mistake_zh="返回静态 logits 的视图：下一次调用覆盖了调用者保留的结果",
    ),
    Mutant(
        "GraphedDecoder",
        "largest_bucket_always",
        "runs every batch in the largest bucket's graph (correct results, but never the small graphs)",
        [
            (
                "        size = padded[0].shape[0]\n",
                "        size = self.buckets[-1]\n        padded = pad_batch(token_ids, positions, slots, [size], self.pad_slot)\n",
            )
        ],
        mistake_zh="每个批都在最大桶的图里运行（结果正确，但从不使用小图）",
    ),
    Mutant(
        "GraphedDecoder",
        "one_cache_per_bucket",
        "gives every bucket's step its own KV cache: a sequence that moves to another bucket loses its past",
        [
            (
                "self.steps = {b: StaticDecodeStep(model, b, self.k_cache, self.v_cache) for b in self.buckets}",
                "self.steps = {b: StaticDecodeStep(model, b, *allocate_kv_cache(model, num_slots + 1)) for b in self.buckets}",
            )
        ],
        mistake_zh="每个桶的 step 各有自己的 KV 缓存：换到另一个桶的序列丢失了它的过去",
    ),
]
