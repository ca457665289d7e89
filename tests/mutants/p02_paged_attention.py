"""Realistic wrong versions of the p02.paged_attention solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "block_allocator",
        "returns_on_every_free",
        "puts the block back on the free list at every free, even while others still hold it",
        [("if self.refcounts[block] == 0:\n            self.free_blocks", "if True:\n            self.free_blocks")],
        mistake_zh="每次 free 都把块放回空闲列表，即使别人还持有它",
    ),
    Mutant(
        "block_allocator",
        "never_returns",
        "decrements the count but never returns the block to the pool (a leak)",
        [("self.free_blocks.append(block)", "pass")],
        mistake_zh="计数减了，却从不把块还给池（泄漏）",
    ),
    Mutant(
        "block_allocator",
        "no_double_free_guard",
        "accepts a free of a block that is not allocated",
        [
            (
                'raise ValueError(f"block {block} is not allocated (a double free?)")',
                "pass",
            )
        ],
        mistake_zh="接受对未分配块的 free",
    ),
    Mutant(
        "block_allocator",
        "allocate_without_count",
        "hands out a block without setting its reference count",
        [("self.refcounts[block] = 1\n", "")],
        mistake_zh="分配块时没有设置它的引用计数",
    ),
    Mutant(
        "paged_kv_cache",
        "fork_without_incref",
        "copies the parent's table without counting the new holder",
        [("self.allocator.incref(block)", "pass")],
        mistake_zh="复制父序列的块表，却没有给新的持有者计数",
    ),
    Mutant(
        "paged_kv_cache",
        "no_copy_on_write",
        "writes into a shared, partly filled block: the parent sees the child's tokens",
        [("copy_last = length % bs != 0 and self.allocator.refcount(table[-1]) > 1", "copy_last = False")],
        mistake_zh="写入共享的、未写满的块：父序列看到了子序列的 token",
    ),
    Mutant(
        "paged_kv_cache",
        "cow_keeps_shared_reference",
        "copies the shared block but never releases its reference to it",
        [("self.allocator.free(shared)                                   # one holder fewer", "pass")],
        mistake_zh="复制了共享块，却从不释放对它的引用",
    ),
    Mutant(
        "paged_kv_cache",
        "cow_without_data_copy",
        "takes a fresh block on copy-on-write but does not copy the tokens already in it",
        [
            (
                "self.key_cache[private] = self.key_cache[shared]\n",
                "",
            )
        ],
        mistake_zh="写时复制拿到了新块，却没把已有的 token 复制过去",
    ),
    Mutant(
        "paged_kv_cache",
        "floor_blocks",
        "counts blocks with floor division: the last partial block is missing",
        [("new_blocks = -(-(length + n) // bs) - len(table)", "new_blocks = (length + n) // bs - len(table) + 1")],
        mistake_zh="块数用向下取整计算：缺了最后那个不满的块",
    ),
    Mutant(
        "paged_kv_cache",
        "fails_half_way",
        "allocates block by block and raises only when the pool runs dry, after changing the table",
        [
            (
                "if new_blocks + copy_last > self.allocator.num_free():",
                "if False:",
            )
        ],
        mistake_zh="一块一块地分配，池用光时才报错，此时块表已经改了",
    ),
    Mutant(
        "paged_decode_attention",
        "reads_stale_slots",
        "attends to every slot of the last block, past the context length",
        [
            (
                "keys = key_cache[blocks].flatten(0, 1)[:n].to(compute_dtype)",
                "keys = key_cache[blocks].flatten(0, 1).to(compute_dtype)",
            ),
            (
                "values = value_cache[blocks].flatten(0, 1)[:n].to(compute_dtype)",
                "values = value_cache[blocks].flatten(0, 1).to(compute_dtype)",
            ),
        ],
        mistake_zh="关注最后一个块的每个槽位，超出了上下文长度",
    ),
    Mutant(
        "paged_decode_attention",
        "gqa_modulo",
        "maps query head h to KV head h % H_kv (repeat instead of repeat_interleave)",
        [
            ("keys = keys.repeat_interleave(Hq // Hkv, dim=1)", "keys = keys.repeat(1, Hq // Hkv, 1)"),
            ("values = values.repeat_interleave(Hq // Hkv, dim=1)", "values = values.repeat(1, Hq // Hkv, 1)"),
        ],
        mistake_zh="query 头 h 映射到 KV 头 h % H_kv（repeat 而不是 repeat_interleave）",
    ),
    Mutant(
        "paged_decode_attention",
        "floor_block_count",
        "takes n // bs blocks: the partial last block is dropped",
        [("blocks = block_tables[b, : -(-n // bs)].long()", "blocks = block_tables[b, : max(n // bs, 1)].long()")],
        mistake_zh="取 n // bs 个块：丢了最后那个不满的块",
    ),
    Mutant(
        "paged_decode_attention",
        "no_pool_check",
        "trusts the block table: an id past the pool is not refused",
        [("if bool((blocks < 0).any() or (blocks >= num_blocks).any()):", "if False:")],
        mistake_zh="信任块表：超出池的 id 不会被拒绝",
    ),
    Mutant(
        "paged_decode_attention",
        "ignores_scale",
        "always uses 1/sqrt(D), ignoring the scale argument",
        [("scale = D ** -0.5 if scale is None else scale", "scale = D ** -0.5")],
        mistake_zh="忽略 scale 参数，总是用 1/√D",
    ),
    Mutant(
        "paged_decode_attention",
        "calls_the_builtin",
        "hands the attention to SDPA, which the exercise forbids",
        [
            (
                'probs = torch.softmax(scores, dim=-1)\n        out[b] = torch.einsum("hn,nhd->hd", probs, values)',
                "out[b] = F.scaled_dot_product_attention(q[b].to(compute_dtype)[:, None], keys.transpose(0, 1), "
                "values.transpose(0, 1), scale=scale)[:, 0]",
            )
        ],
        mistake_zh="把注意力交给练习禁止的 SDPA",
    ),
]
