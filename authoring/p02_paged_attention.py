"""Source of 02_PyTorch_Algorithms/31_Paged_Attention.ipynb (build with `python -m llm_algo build p02.paged_attention`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.paged_attention",
        path="02_PyTorch_Algorithms/31_Paged_Attention.ipynb",
        title_en="PagedAttention: a block allocator, block tables and copy-on-write",
        title_zh="PagedAttention：块分配器、块表与写时复制",
        difficulty="hard",
        device="cpu",
        minutes=100,
        prerequisites=["p01.kv_cache_math", "p02.attention_mha_gqa"],
    )
    lesson.title(
        intro=r"""
        A serving engine does not know how long an answer will be. Llama-3-8B keeps
        $2 \times 32\ \text{layers} \times 8\ \text{KV heads} \times 128 \times 2\ \text{bytes} = 128$ KiB of KV cache per token,
        so reserving a contiguous 8192-token slot per request costs 1 GiB whether the request ends after 50 tokens
        or 8000. The vLLM paper (Kwon et al., SOSP 2023, Figure 2) measured that earlier systems used only about
        20–38 % of their KV memory for actual token states; the rest was reservation, internal and external
        fragmentation. PagedAttention stores the cache in fixed-size **blocks** (pages) handed out on demand, maps each
        sequence to its blocks through a **block table**, and lets sequences **share** blocks (a common prompt,
        parallel samples, beams) with reference counts and copy-on-write, as an operating system does with virtual
        memory. vLLM reported 2–4× the throughput of the systems before it at the same latency.

        **You will implement** the block allocator with reference counts, a paged KV cache (append, fork with
        copy-on-write, free, gather) and decode attention that reads keys and values through block tables with
        grouped-query heads. **Graded against** a set-based model of the allocator under thousands of random
        operations (no block leaked, none handed out twice, counts equal to the number of tables that hold each
        block), contiguous per-sequence token lists under a random workload of appends, forks and frees, and
        `F.scaled_dot_product_attention` over the same cache laid out contiguously, in float64, with NaN planted in
        every slot a correct reader never touches.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：按最大长度为每个请求预留连续的 KV 缓存会浪费大量显存（预留、内部碎片、外部碎片）；vLLM 论文测得旧系统只有约 20–38% 的 KV 显存真正存放了 token。
        - **分页（paging）**：KV 缓存切成固定大小的块（block，如 16 个 token）；块表（block table）把序列的逻辑位置 $p$ 映射到物理块 `table[p // bs]` 的槽位 `p % bs`。
        - **块分配器（block allocator）**：空闲链表 + 引用计数（reference count）；计数降到 0 才回收。
        - **共享与写时复制（copy-on-write）**：fork（并行采样、束搜索）时子序列共享父序列的所有块，只增加引用计数；向一个被共享且未写满的块写入前先复制它。
        - **分页解码注意力**：每个序列按块表取出自己的 K/V，只读前 `context_len` 个位置；GQA 中查询头 $h$ 对应 KV 头 $h // (H_q/H_{kv})$。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem, with numbers

        Per token, a decoder with $n_\text{layers}$ layers and $H_{kv}$ KV heads of size $D$ stores
        $2\, n_\text{layers} H_{kv} D$ numbers (one key and one value per head and layer). A server with 40 GB of a
        GPU's memory left after the weights holds $40 \cdot 2^{30} / 2^{17} \approx 327{,}000$ Llama-3-8B tokens. If
        each request reserves its maximum length up front, the number of requests in flight is
        $327\text{k} / 8192 = 40$; if each holds only what it has written, rounded up to a 16-token block, and
        requests average 600 tokens, it is over 500. The batch size of the decode step (and with it the throughput,
        since decode is memory-bound and reads the weights once per step for the whole batch) grows by the same
        factor.

        ## 2. The data structures, with shapes

        - **Pool**: `key_cache`, `value_cache`: `(num_blocks, block_size, H_kv, D)` each, allocated once. vLLM sizes it
          from the memory left after a profiling run (`gpu_memory_utilization`).
        - **Allocator**: a free list of block ids and a reference count per block. `allocate()` pops a free block
          and sets its count to 1; `incref(b)` adds a holder; `free(b)` removes one and returns the block to the free
          list when the count reaches 0. Invariant: a block is on the free list **iff** its count is 0, and
          $\text{count}(b) = $ the number of block tables that list $b$.
        - **Block table** of a sequence of length $L$: a list of $\lceil L / bs \rceil$ block ids. Token $p$ lives in
          block `table[p // bs]`, slot `p % bs`. Only the last block can be partly filled, so internal fragmentation
          is at most $bs - 1$ slots per sequence.
        - **Fork** (parallel sampling with `n > 1`, beam search): the child's table is a copy of the parent's and
          every block's count goes up by one; no data is copied. **Copy-on-write**: before writing a token into a
          block whose count is above 1 (only ever the last, partly filled one), take a fresh block, copy the shared
          block's contents into it, drop one reference to the shared block, and write into the copy. A full shared
          block is never written again: new tokens go into a new block.

        ## 3. Paged decode attention

        At a decode step each sequence $b$ has one query $q_b \in \mathbb{R}^{H_q \times D}$ and a context of
        $n_b$ cached tokens. With `block_tables: (B, max_blocks)` (unused entries padded, here with $-1$) and
        `context_lens: (B,)`:

        $$
        K_b = \big[\,\texttt{key\_cache}[\texttt{table}_b[p /\!/ bs],\ p \bmod bs]\,\big]_{p=0}^{n_b-1} \in \mathbb{R}^{n_b \times H_{kv} \times D},
        \qquad
        o_{b,h} = \operatorname{softmax}\!\Big(\tfrac{q_{b,h} K_{b,g(h)}^\top}{\sqrt{D}}\Big) V_{b,g(h)},
        $$

        with $g(h) = \lfloor h / (H_q / H_{kv}) \rfloor$ the KV head that query head $h$ shares (grouped-query
        attention, as in `p02.attention_mha_gqa`). Slots past $n_b$ in the last block and blocks that no table lists
        hold whatever was there before: stale tokens of a freed sequence, or garbage. The checks fill them with NaN.
    """)
    lesson.setup(r"""
        import math
        import random

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 4. Exercise `block_allocator`

        Block ids are the integers `0 .. num_blocks - 1`. `allocate()` raises `RuntimeError` when the pool is empty.
        Refuse with `ValueError`: a block id outside the pool, and `incref`/`free` of a block that is not allocated
        (a double free would otherwise hand the same block to two sequences later). All operations are $O(1)$.
    """)
    lesson.exercise(
        "block_allocator",
        r'''
        class BlockAllocator:
            """A pool of num_blocks KV-cache blocks with reference counts."""

            def __init__(self, num_blocks: int):
                if num_blocks < 1:
                    raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
                self.num_blocks = num_blocks
                # TODO: a reference count per block (all 0) and a free list holding every block
                ### BEGIN SOLUTION
                self.refcounts = [0] * num_blocks
                self.free_blocks = list(range(num_blocks - 1, -1, -1))  # pop() hands out block 0 first
                ### END SOLUTION

            def _checked(self, block: int) -> int:
                """Refuse an id outside the pool, or one that is not allocated."""
                # TODO: ValueError for ids outside 0 .. num_blocks - 1 and for blocks whose count is 0
                ### BEGIN SOLUTION
                if not 0 <= block < self.num_blocks:
                    raise ValueError(f"block {block} is outside the pool of {self.num_blocks} blocks")
                if self.refcounts[block] == 0:
                    raise ValueError(f"block {block} is not allocated (a double free?)")
                return block
                ### END SOLUTION

            def num_free(self) -> int:
                # TODO: how many blocks allocate() can still hand out
                ### BEGIN SOLUTION
                return len(self.free_blocks)
                ### END SOLUTION

            def refcount(self, block: int) -> int:
                if not 0 <= block < self.num_blocks:
                    raise ValueError(f"block {block} is outside the pool of {self.num_blocks} blocks")
                return self.refcounts[block]

            def allocate(self) -> int:
                # TODO: RuntimeError when no block is free; otherwise take one, count 1, return its id
                ### BEGIN SOLUTION
                if not self.free_blocks:
                    raise RuntimeError(f"out of KV-cache blocks: all {self.num_blocks} are in use")
                block = self.free_blocks.pop()
                self.refcounts[block] = 1
                return block
                ### END SOLUTION

            def incref(self, block: int) -> None:
                # TODO: one more holder of an allocated block
                ### BEGIN SOLUTION
                self.refcounts[self._checked(block)] += 1
                ### END SOLUTION

            def free(self, block: int) -> None:
                # TODO: one holder fewer; back on the free list when nobody holds it
                ### BEGIN SOLUTION
                self.refcounts[self._checked(block)] -= 1
                if self.refcounts[block] == 0:
                    self.free_blocks.append(block)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `paged_kv_cache`

        A cache of sequences (by integer id) over one pool, using your `BlockAllocator`.

        - `add_sequence(seq_id)`: an empty sequence (`ValueError` if the id exists).
        - `append(seq_id, k, v)` with `k, v: (n, H_kv, D)`: write $n \ge 1$ tokens at positions $L .. L+n-1$,
          copying the last block first if it is shared and partly filled, and allocating new blocks as needed.
          **First count** the blocks this needs (new blocks, plus one for a copy); if the pool cannot supply them,
          raise `RuntimeError` and leave everything unchanged (a scheduler then preempts a sequence; see
          `p02.continuous_batching`).
        - `fork(parent_id, child_id)`: the child shares every block of the parent.
        - `free_sequence(seq_id)`: drop the sequence's reference to each of its blocks.
        - `gather(seq_id)`: its keys and values, contiguous, `(L, H_kv, D)` each (for checks and debugging;
          attention never does this).

        An unknown `seq_id` raises `KeyError` naming it; a `k` or `v` of the wrong shape raises `ValueError`.
    """)
    lesson.exercise(
        "paged_kv_cache",
        r'''
        class PagedKVCache:
            """KV cache in fixed-size blocks: key_cache, value_cache (num_blocks, block_size, H_kv, D)."""

            def __init__(self, num_blocks, block_size, num_kv_heads, head_dim, dtype=torch.float32):
                self.block_size = block_size
                self.allocator = BlockAllocator(num_blocks)
                self.key_cache = torch.zeros(num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype)
                self.value_cache = torch.zeros_like(self.key_cache)
                self.block_tables: dict[int, list[int]] = {}  # seq_id -> block ids, ceil(length / block_size) of them
                self.lengths: dict[int, int] = {}  # seq_id -> number of tokens written

            def _table(self, seq_id):
                if seq_id not in self.block_tables:
                    raise KeyError(f"the cache holds no sequence {seq_id}; it holds {sorted(self.block_tables)}")
                return self.block_tables[seq_id]

            def add_sequence(self, seq_id):
                if seq_id in self.block_tables:
                    raise ValueError(f"sequence {seq_id} already exists")
                self.block_tables[seq_id], self.lengths[seq_id] = [], 0

            def append(self, seq_id, k, v):
                """k, v: (n, H_kv, D). All or nothing: RuntimeError, and no change, when the pool is too small."""
                table = self._table(seq_id)
                if k.dim() != 3 or k.shape[0] < 1 or k.shape[1:] != self.key_cache.shape[2:] or v.shape != k.shape:
                    raise ValueError(f"k and v must be (n >= 1, {self.key_cache.shape[2]}, {self.key_cache.shape[3]}), "
                                     f"got {tuple(k.shape)} and {tuple(v.shape)}")
                # TODO: count the new blocks needed and whether the last block must be copied (shared, partly full);
                #       RuntimeError before any change if the allocator cannot supply them
                # TODO: copy-on-write: a fresh block with the shared block's contents replaces it in this table
                # TODO: allocate the new blocks, then write token i at position L + i: block table[p // bs], slot p % bs
                ### BEGIN SOLUTION
                bs, length, n = self.block_size, self.lengths[seq_id], k.shape[0]
                new_blocks = -(-(length + n) // bs) - len(table)                  # ceil division
                copy_last = length % bs != 0 and self.allocator.refcount(table[-1]) > 1
                if new_blocks + copy_last > self.allocator.num_free():
                    raise RuntimeError(f"sequence {seq_id} needs {new_blocks + copy_last} more blocks, "
                                       f"{self.allocator.num_free()} are free")
                if copy_last:
                    shared, private = table[-1], self.allocator.allocate()
                    self.key_cache[private] = self.key_cache[shared]
                    self.value_cache[private] = self.value_cache[shared]
                    self.allocator.free(shared)                                   # one holder fewer
                    table[-1] = private
                for _ in range(new_blocks):
                    table.append(self.allocator.allocate())
                for i in range(n):
                    position = length + i
                    block, slot = table[position // bs], position % bs
                    self.key_cache[block, slot] = k[i]
                    self.value_cache[block, slot] = v[i]
                self.lengths[seq_id] = length + n
                ### END SOLUTION

            def fork(self, parent_id, child_id):
                # TODO: the child shares every block of the parent (no copy of any data)
                ### BEGIN SOLUTION
                parent = self._table(parent_id)
                if child_id in self.block_tables:
                    raise ValueError(f"sequence {child_id} already exists")
                for block in parent:
                    self.allocator.incref(block)
                self.block_tables[child_id] = list(parent)
                self.lengths[child_id] = self.lengths[parent_id]
                ### END SOLUTION

            def free_sequence(self, seq_id):
                # TODO: release the sequence's hold on each of its blocks and forget it
                ### BEGIN SOLUTION
                for block in self._table(seq_id):
                    self.allocator.free(block)
                del self.block_tables[seq_id], self.lengths[seq_id]
                ### END SOLUTION

            def gather(self, seq_id):
                """(keys, values), each (L, H_kv, D), in token order."""
                # TODO: read the sequence's blocks in table order and keep its first L slots
                ### BEGIN SOLUTION
                table, length = self._table(seq_id), self.lengths[seq_id]
                index = torch.tensor(table, dtype=torch.long)
                keys = self.key_cache[index].flatten(0, 1)[:length]                 # (L, H_kv, D)
                values = self.value_cache[index].flatten(0, 1)[:length]
                return keys, values
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `paged_decode_attention`

        One query token per sequence; keys and values only through the block tables. Compute in float32 at least,
        return `q`'s dtype. Validate: `H_q` a multiple of `H_kv`; every context length in
        $[1, \text{max\_blocks} \cdot bs]$; every block id a sequence uses inside the pool (`ValueError` naming
        the sequence and the id). `F.scaled_dot_product_attention` is the checks' reference and is forbidden here.
    """)
    lesson.exercise(
        "paged_decode_attention",
        r'''
        def paged_decode_attention(q, key_cache, value_cache, block_tables, context_lens, scale=None):
            """Decode attention over a paged KV cache.

            q: (B, H_q, D); key_cache, value_cache: (num_blocks, block_size, H_kv, D)
            block_tables: (B, max_blocks) int, padded with -1; context_lens: (B,) int
            returns (B, H_q, D) in q.dtype
            """
            # TODO: validate heads, context lengths and the block ids each sequence uses
            # TODO: per sequence: its ceil(n / bs) blocks -> keys and values (n, H_kv, D), the first n slots only
            # TODO: query head h reads KV head h // (H_q // H_kv); softmax(q k^T * scale) v
            ### BEGIN SOLUTION
            B, Hq, D = q.shape
            num_blocks, bs, Hkv, _ = key_cache.shape
            if Hq % Hkv != 0:
                raise ValueError(f"{Hq} query heads cannot share {Hkv} KV heads evenly")
            max_blocks = block_tables.shape[1]
            scale = D ** -0.5 if scale is None else scale
            compute_dtype = torch.promote_types(q.dtype, torch.float32)
            out = torch.empty(B, Hq, D, dtype=compute_dtype)
            for b in range(B):
                n = int(context_lens[b])
                if not 1 <= n <= max_blocks * bs:
                    raise ValueError(f"sequence {b}: context length {n} outside [1, {max_blocks * bs}]")
                blocks = block_tables[b, : -(-n // bs)].long()                    # (ceil(n / bs),)
                if bool((blocks < 0).any() or (blocks >= num_blocks).any()):
                    raise ValueError(f"sequence {b}: block table {blocks.tolist()} points past the pool of {num_blocks}")
                keys = key_cache[blocks].flatten(0, 1)[:n].to(compute_dtype)    # (n, H_kv, D)
                values = value_cache[blocks].flatten(0, 1)[:n].to(compute_dtype)
                keys = keys.repeat_interleave(Hq // Hkv, dim=1)                 # (n, H_q, D): head h -> h // group
                values = values.repeat_interleave(Hq // Hkv, dim=1)
                scores = torch.einsum("hd,nhd->hn", q[b].to(compute_dtype), keys) * scale  # (H_q, n)
                probs = torch.softmax(scores, dim=-1)
                out[b] = torch.einsum("hn,nhd->hd", probs, values)             # (H_q, D)
            return out.to(q.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Pictures: where the memory goes

        The first figure replays a workload of 200 requests whose final lengths are drawn between 20 and 2048 tokens
        and compares the fraction of reserved KV memory that holds tokens: reserving the maximum length, paging with
        several block sizes. The second forks 4 parallel samples from a 1000-token prompt in your `PagedKVCache` and
        counts the blocks in use as each sample generates 200 tokens, against 4 independent copies.
    """)
    lesson.code(r"""
        random.seed(0)
        lengths = [random.randint(20, 2048) for _ in range(200)]
        used = sum(lengths)
        labels, utilisation = ["reserve max (2048)"], [used / (2048 * len(lengths))]
        for bs in (256, 64, 16, 1):
            labels.append(f"paged, bs={bs}")
            utilisation.append(used / sum(-(-n // bs) * bs for n in lengths))

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
        ax1.barh(labels, [100 * u for u in utilisation], color=["C3"] + ["C0"] * 4)
        for y, u in enumerate(utilisation):
            ax1.text(100 * u + 1, y, f"{100 * u:.1f} %", va="center", fontsize=8)
        ax1.set_xlim(0, 115); ax1.set_xlabel("% of reserved KV memory holding tokens")
        ax1.set_title("200 requests, lengths 20..2048")
        try:
            cache = PagedKVCache(num_blocks=400, block_size=16, num_kv_heads=1, head_dim=2)
            cache.add_sequence(0)
            cache.append(0, torch.randn(1000, 1, 2), torch.randn(1000, 1, 2))
            for child in range(1, 4):
                cache.fork(0, child)
            shared_curve = []
            for step in range(200):
                for seq in range(4):
                    cache.append(seq, torch.randn(1, 1, 2), torch.randn(1, 1, 2))
                shared_curve.append(400 - cache.allocator.num_free())
            copies_curve = [4 * -(-(1000 + s + 1) // 16) for s in range(200)]
            ax2.plot(shared_curve, label="fork + copy-on-write (yours)")
            ax2.plot(copies_curve, label="4 independent copies")
            ax2.set_xlabel("generated tokens per sample"); ax2.set_ylabel("blocks in use (16 tokens each)")
            ax2.set_title("parallel sampling, n = 4, 1000-token prompt"); ax2.legend(fontsize=8)
        except NotImplementedError:
            ax2.text(0.5, 0.5, "PagedKVCache not attempted yet", ha="center")
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **Allocator.** A Python list used as a stack is the free list (vLLM's `FreeKVCacheBlockQueue` is a doubly
        linked list, so that a cached block can also be taken out of the middle when a prefix-cache hit revives it;
        see `p02.prefix_cache`). `_checked` is the guard that turns a double free into an error at the call that made
        it, instead of a silent corruption thousands of steps later when two sequences write the same block.

        **Cache.** `append` is *check, then act*: the number of blocks it needs is
        $\lceil (L + n) / bs \rceil - |\text{table}|$, plus one when the last block is shared and not full. Asking the
        allocator for them one by one and failing half-way would leave a table with extra blocks and a length that
        does not match, which is exactly the state a scheduler cannot recover from. Copy-on-write copies one block
        (at most $bs$ tokens) per forked sequence, once; full blocks stay shared forever. In the figure the
        1000-token prompt fills 62 full blocks and half of a 63rd: the first appends copy that half block for three
        of the four samples (the fourth then holds it alone and writes in place), and from there both curves grow by
        four blocks every 16 tokens, the shared one about 186 blocks lower.

        **Decode attention.** `-(-n // bs)` is $\lceil n/bs \rceil$; `flatten(0, 1)[:n]` drops the stale slots of the
        last block; `repeat_interleave` maps head $h$ to KV head $h // g$ (`repeat` would map it to $h \bmod H_{kv}$,
        which is the same only when $H_{kv} = 1$ or $H_{kv} = H_q$). The checks plant NaN in every slot a correct
        reader never touches, so reading one stale slot makes the whole row NaN.

        **The usual mistakes, and why they are wrong**: a `free` that returns
        the block on every decrement (two sequences then own it), a `free` that never returns it (a leak), no
        refusal of a double free; a fork that copies the table without counting references, a write into a shared
        block without copying it, a copy-on-write that forgets to release the shared block, `floor` instead of
        `ceil`, an out-of-blocks error raised after half the changes; reading past the context length, `repeat`
        instead of `repeat_interleave`, a missing scale.

        **Cost.** The block table adds one indirection per block: the kernel loads `block_tables[b, j]` and then a
        `(bs, D)` tile of keys. vLLM's CUDA kernel (`csrc/attention/attention_kernels.cu`, "paged_attention_v1/v2")
        assigns a thread block to each (sequence, head) and, in v2, also splits long contexts into partitions merged
        with their log-sum-exps (the rescaling of `p02.flash_attention_sim`). Block size 16 is vLLM's default on
        GPUs: large enough for coalesced loads, small enough that the last block wastes at most 15 slots.

        **In production.** vLLM V1's `KVCacheManager` and `BlockPool` keep the free queue, the reference counts and a
        hash of each full block for prefix caching; the model runner turns the block tables into a
        `(num_seqs, max_blocks)` int32 tensor and a `slot_mapping` (the flat slot `block * bs + p % bs` of every new
        token) so that one `reshape_and_cache` kernel writes the new keys and values of the whole batch.
        FlashInfer and FlashAttention (`block_table=` argument of `flash_attn_with_kvcache`) read the same layout.
        SGLang uses a token-level pool (block size 1) with a radix tree on top.
    """)
    lesson.mistakes()
    return lesson
