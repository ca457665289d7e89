"""Source of 04_CUDA_Systems/09_Memory_Pool.ipynb (build with `python -m llm_algo build p04.memory_pool`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.memory_pool",
        path="04_CUDA_Systems/09_Memory_Pool.ipynb",
        title_en="A caching allocator: block pools, splitting, coalescing and fragmentation",
        title_zh="缓存分配器：块池、切分、合并与碎片",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p00.memory", "p02.paged_attention"],
    )
    lesson.title(
        intro=r"""
        `cudaMalloc` and `cudaFree` are expensive driver calls (the CUDA runtime documentation notes that `cudaFree`
        synchronises the device), while a training step allocates and frees thousands of tensors. So PyTorch
        never gives memory back to the driver on `del tensor`: its **caching allocator** (缓存分配器,
        `c10/cuda/CUDACachingAllocator.cpp`) keeps the freed block, and hands it out again to the next request that
        fits. That is why `nvidia-smi` shows far more memory in use than `torch.cuda.memory_allocated()`, why a job
        can die with *"CUDA out of memory. Tried to allocate 2.00 GiB ... 6.5 GiB reserved but unallocated"*, and why
        `torch.cuda.empty_cache()` exists.

        **You will implement** PyTorch's sizing rules (512-byte granularity, a small pool served from 2 MiB segments,
        a large pool from 20 MiB or exactly-rounded segments, when a block is split) and then the allocator itself:
        best-fit search in two pools, splitting, freeing into the cache, coalescing neighbours, `empty_cache`, an
        out-of-memory retry, and its statistics (allocated, requested, reserved, fragmentation, largest free block).
        **Graded against** a brute-force model of the same policy written differently (intervals per segment,
        scanned in full), on hand-derived cases and thousands of random requests, with an invariant checker on every
        step: blocks never overlap, every reserved byte belongs to exactly one block, no two free neighbours are left
        unmerged. On a GPU a demo replays the same trace through PyTorch's real allocator and prints
        `torch.cuda.memory_stats` next to yours.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **为什么要缓存**：`cudaMalloc`/`cudaFree` 很慢且 `cudaFree` 会同步整个设备；PyTorch 的缓存分配器 (caching allocator) 在 `del` 时不还给驱动，而是把块 (block) 留在缓存里复用。
        - **尺寸规则**：请求向上取整到 512 字节的倍数；取整后 $\le$ 1 MiB 走小池 (small pool)，从 2 MiB 段 (segment) 中切；更大的走大池，$<$ 10 MiB 时申请 20 MiB 段，否则按 2 MiB 向上取整申请。
        - **最佳适配 (best fit)**：在同一个池里找 size 最小的、足够大的空闲块（相同大小取地址最低者）；找不到才申请新段。
        - **切分 (split)**：块比请求大时把剩余部分切成新的空闲块；小池剩余 $\ge 512$ 字节就切，大池剩余 $> 1$ MiB 才切（否则整块给出，多出的字节计入 allocated）。
        - **合并 (coalesce)**：释放时与同一段内相邻的空闲块合并，缓存中不会有两个相邻的空闲块。
        - **统计**：allocated = 已分配块大小之和，requested = 用户请求之和，reserved = 段大小之和；reserved − allocated 是缓存着但没用上的内存（碎片 fragmentation）；largest_free 决定下一次大请求能否不申请新段。
        - **OOM 重试**：申请新段失败时先 `empty_cache()`（释放整段空闲的段）再试一次，仍失败才报 OOM；碎片会让“总空闲够大却没有一块够大”。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: memory that is free but not usable

        A training step of a transformer allocates activations layer by layer in the forward pass, frees them in
        reverse in the backward pass, and allocates and frees temporaries (attention scores, MLP hidden states,
        gradient buffers) all the way through. Going to the driver for each of them would be ruinous: `cudaFree`
        is a device-wide synchronisation, so the CPU could not run ahead of the GPU any more. PyTorch's answer (its
        custom caching tensor allocator, described in the PyTorch paper, Paszke et al., NeurIPS 2019, section 5.3)
        is to keep every freed block and reuse it.

        Three numbers `torch.cuda.memory_stats()` reports, and that you will compute:

        | stat | meaning | PyTorch name |
        | --- | --- | --- |
        | **requested** | bytes the program asked for | `requested_bytes.all.current` |
        | **allocated** | bytes of the blocks handed out (≥ requested: rounding, unsplit tails) | `allocated_bytes.all.current`, `torch.cuda.memory_allocated()` |
        | **reserved** | bytes of the segments obtained from `cudaMalloc` | `reserved_bytes.all.current`, `torch.cuda.memory_reserved()` |

        `reserved − allocated` is memory the process holds that no tensor uses. Part of it is the cache working as
        intended (it will be reused), part is **fragmentation** (碎片): free bytes cut into pieces too small for the
        next request. When a 2 GiB request finds 6 GiB free but no 2 GiB *piece*, the allocator has to ask the driver
        for a new segment; when the driver has nothing left, the job dies with an out-of-memory error that reports
        gigabytes "reserved but unallocated". PyTorch's own error message then suggests
        `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, the modern fix (section 7).

        ## 2. The rules, with the constants of `CUDACachingAllocator.cpp`

        A request of $s$ bytes ($s \ge 1$) becomes a block of

        $$ \text{round}(s) = 512 \cdot \lceil s / 512 \rceil \qquad (\text{kMinBlockSize} = 512:\ \text{so } 1 \to 512,\ 513 \to 1024). $$

        The rounded size picks a **pool**: small if $\text{round}(s) \le 1\,\text{MiB}$ (kSmallSize), large
        otherwise. Each pool keeps its cached free blocks apart: a small tensor never nibbles a hole into a large
        block, which keeps the large blocks whole for the large requests. When no cached block fits, a new
        **segment** is reserved:

        $$
        \text{segment}(s) = \begin{cases}
        2\,\text{MiB} & \text{round}(s) \le 1\,\text{MiB} \quad (\text{kSmallBuffer: many small blocks share it}) \\
        20\,\text{MiB} & 1\,\text{MiB} < \text{round}(s) < 10\,\text{MiB} \quad (\text{kLargeBuffer, below kMinLargeAlloc}) \\
        2\,\text{MiB} \cdot \lceil \text{round}(s) / 2\,\text{MiB} \rceil & \text{round}(s) \ge 10\,\text{MiB} \quad (\text{kRoundLarge})
        \end{cases}
        $$

        A found block (or fresh segment) of $b$ bytes serving a request of $r = \text{round}(s)$ bytes is **split**
        when the remainder $b - r$ is worth keeping: in the small pool when $b - r \ge 512$, in the large pool only
        when $b - r > 1\,\text{MiB}$. A large block is not cut for a sliver: the request gets the whole block, and
        `allocated` counts all of it. The kept part is the *low* addresses; the remainder becomes a free block right
        after it:

        ```
        segment (2 MiB, small pool)      after malloc(1000), malloc(1)        after free(a)
        |-------- free 2097152 -------|  |a 1024|b 512|---- free 2095616 --|  |f 1024|b 512|---- free 2095616 --|
        ```

        **Best fit** (最佳适配): among the pool's cached free blocks, take the smallest one with size $\ge r$; among
        equal sizes, the lowest address (PyTorch keeps each pool in a `std::set` ordered by (stream, size, address)
        and calls `lower_bound`). **Freeing** marks the block free and merges it with its previous and next
        neighbours *in the same segment* when they are free, so the cache never holds two adjacent free blocks.
        **`empty_cache()`** returns to the driver every segment that is one single free block; a segment with one
        live byte stays. When the driver refuses a new segment (here: when reserved + the new segment would exceed
        the device's `capacity`), the allocator empties its cache and tries once more before it gives up.
    """)
    lesson.setup(r"""
        import bisect
        from dataclasses import dataclass

        import matplotlib.pyplot as plt
        import torch

        MiB = 1024 * 1024
        MIN_BLOCK = 512  # kMinBlockSize: every block is a multiple of this
        SMALL_SIZE = 1 * MiB  # kSmallSize: rounded requests up to this go to the small pool
        SMALL_SEGMENT = 2 * MiB  # kSmallBuffer: the segment a small-pool miss reserves
        LARGE_SEGMENT = 20 * MiB  # kLargeBuffer: the segment a large-pool miss below MIN_LARGE_ALLOC reserves
        MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc: from here on a segment is the request rounded to ROUND_LARGE
        ROUND_LARGE = 2 * MiB  # kRoundLarge
    """)
    lesson.md(r"""
        ## 3. Exercise `sizing_rules`

        Four small functions, the whole policy of section 2:

        - `round_size(size)`: the block size, $512\lceil s/512\rceil$. A size that is not an integer (a float, a
          bool) raises `TypeError`; a size $\le 0$ raises `ValueError` (`torch.empty(0)` never reaches the
          allocator, and a negative size is a bug upstream).
        - `pool_of(size)`: `"small"` or `"large"`, from the rounded size.
        - `segment_size(size)`: the bytes a new segment for this request reserves.
        - `should_split(pool, remaining)`: whether a block with `remaining` spare bytes (a multiple of 512, $\ge 0$)
          is cut in two.

        The first three validate through `round_size`.
    """)
    lesson.exercise(
        "sizing_rules",
        r'''
        def round_size(size: int) -> int:
            """Bytes of the block that a request of `size` bytes receives: a multiple of MIN_BLOCK, at least MIN_BLOCK."""
            # TODO: TypeError unless size is an int (bool is not a size); ValueError unless size >= 1
            # TODO: round up to a multiple of MIN_BLOCK
            ### BEGIN SOLUTION
            if isinstance(size, bool) or not isinstance(size, int):
                raise TypeError(f"a request size must be an int number of bytes, got {type(size).__name__} {size!r}")
            if size <= 0:
                raise ValueError(f"a request size must be >= 1 byte, got {size}")
            return MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)
            ### END SOLUTION


        def pool_of(size: int) -> str:
            """'small' when the rounded size is at most SMALL_SIZE, else 'large'."""
            # TODO
            ### BEGIN SOLUTION
            return "small" if round_size(size) <= SMALL_SIZE else "large"
            ### END SOLUTION


        def segment_size(size: int) -> int:
            """Bytes of the segment reserved when no cached block can serve a request of `size` bytes."""
            # TODO: SMALL_SEGMENT for the small pool; LARGE_SEGMENT below MIN_LARGE_ALLOC; else round up to ROUND_LARGE
            ### BEGIN SOLUTION
            rounded = round_size(size)
            if rounded <= SMALL_SIZE:
                return SMALL_SEGMENT
            if rounded < MIN_LARGE_ALLOC:
                return LARGE_SEGMENT
            return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) // ROUND_LARGE)
            ### END SOLUTION


        def should_split(pool: str, remaining: int) -> bool:
            """Whether a block with `remaining` spare bytes after the request is cut in two ('small' or 'large' pool)."""
            # TODO: small pool: a remainder of at least MIN_BLOCK; large pool: a remainder of more than SMALL_SIZE
            ### BEGIN SOLUTION
            if pool == "small":
                return remaining >= MIN_BLOCK
            return remaining > SMALL_SIZE
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `CachingAllocator`

        The data structures are given (they are PyTorch's): a `Block` knows its address, size, pool, segment, whether
        it is allocated, and its `prev`/`next` neighbours inside its segment (a doubly linked list in address order).
        `blocks` maps the address of every block, live or cached, to it; each pool's cached free blocks sit in a list
        sorted by `(size, address)`, so best fit is a `bisect`. `_new_segment` plays `cudaMalloc`: a fresh segment at
        a new address, or `None` when the device's `capacity` would be exceeded. `snapshot()` lists the segments and
        their blocks like `torch.cuda.memory_snapshot()`.

        You write:

        - `_best_fit(pool, rounded)`: the cached free block of that pool to serve `rounded` bytes, or `None`.
        - `malloc(size) -> address`: round; best fit, else a new segment, else `empty_cache()` and one more try,
          else `MemoryError` (a message with the request, reserved and allocated bytes, as PyTorch's). Split when
          `should_split` says so. Remember `requested` on the block.
        - `free(address)`: `ValueError` for an address that is not a live block (never allocated, an interior
          address, or freed already: a *double free*, which in C++ corrupts the allocator silently); otherwise
          free it and merge it with free neighbours, then cache the result.
        - `empty_cache()`: release every segment that is a single free block.
        - `stats()`: `allocated`, `requested`, `reserved`, `fragmentation` (= reserved − allocated),
          `largest_free` (the largest cached free block, 0 when none) and `segments` (how many are reserved).

        A refused call (bad size, bad free) must leave the allocator exactly as it was.
    """)
    lesson.exercise(
        "CachingAllocator",
        r'''
        @dataclass(eq=False)
        class Block:
            address: int
            size: int
            pool: str  # "small" or "large"
            segment: int  # address of the segment this block lives in
            allocated: bool = False
            requested: int = 0  # bytes the caller asked for (0 while free)
            prev: "Block | None" = None  # neighbour at lower addresses in the same segment
            next: "Block | None" = None  # neighbour at higher addresses in the same segment


        class CachingAllocator:
            """A model of PyTorch's CUDACachingAllocator for one stream: addresses are plain ints."""

            def __init__(self, capacity: int | None = None, base_address: int = 0x7F00_0000_0000):
                self.capacity = capacity  # bytes the device can reserve in total; None: unlimited
                self._next_address = base_address  # where the next segment starts (a fresh cudaMalloc)
                self.segments: dict[int, tuple[int, str]] = {}  # segment address -> (size, pool)
                self.blocks: dict[int, Block] = {}  # address -> every block, allocated or cached
                self.free_lists = {"small": [], "large": []}  # pool -> sorted [(size, address)] of cached free blocks

            # ---- given: bookkeeping ----
            def _cache(self, block: Block) -> None:
                bisect.insort(self.free_lists[block.pool], (block.size, block.address))

            def _uncache(self, block: Block) -> None:
                free = self.free_lists[block.pool]
                free.pop(bisect.bisect_left(free, (block.size, block.address)))

            def _new_segment(self, nbytes: int, pool: str) -> Block | None:
                """cudaMalloc: a free Block spanning a new segment (not cached yet), or None when the device is full."""
                reserved = sum(size for size, _ in self.segments.values())
                if self.capacity is not None and reserved + nbytes > self.capacity:
                    return None
                address, self._next_address = self._next_address, self._next_address + nbytes
                self.segments[address] = (nbytes, pool)
                block = Block(address, nbytes, pool, segment=address)
                self.blocks[address] = block
                return block

            def snapshot(self) -> list[dict]:
                """Like torch.cuda.memory_snapshot(): each segment with its blocks in address order."""
                out = []
                for address, (size, pool) in sorted(self.segments.items()):
                    blocks, block = [], self.blocks[address]
                    while block is not None:
                        blocks.append({"address": block.address, "size": block.size, "allocated": block.allocated,
                                       "requested": block.requested})
                        block = block.next
                    out.append({"address": address, "size": size, "pool": pool, "blocks": blocks})
                return out

            # ---- yours ----
            def _best_fit(self, pool: str, rounded: int) -> Block | None:
                """The smallest cached free block of `pool` with size >= rounded (lowest address among equals)."""
                # TODO: bisect into self.free_lists[pool]
                ### BEGIN SOLUTION
                free = self.free_lists[pool]
                index = bisect.bisect_left(free, (rounded, -1))  # first (size, address) with size >= rounded
                if index == len(free):
                    return None
                return self.blocks[free[index][1]]
                ### END SOLUTION

            def malloc(self, size: int) -> int:
                """Address of a block of at least `size` bytes."""
                # TODO: round (round_size validates), choose the pool
                # TODO: best fit (take it out of the cache), else a new segment, else empty_cache() and retry,
                #       else MemoryError
                # TODO: split off the remainder as a cached free block when should_split says so
                # TODO: mark the block allocated, remember the request, return its address
                ### BEGIN SOLUTION
                rounded, pool = round_size(size), pool_of(size)
                block = self._best_fit(pool, rounded)
                if block is not None:
                    self._uncache(block)
                else:
                    block = self._new_segment(segment_size(size), pool)
                    if block is None:  # the device is full: give the cached segments back and try once more
                        self.empty_cache()
                        block = self._new_segment(segment_size(size), pool)
                    if block is None:
                        stats = self.stats()
                        raise MemoryError(
                            f"out of memory: tried to allocate {size} bytes; capacity {self.capacity}, "
                            f"{stats['reserved']} reserved, {stats['allocated']} allocated, "
                            f"largest free block {stats['largest_free']}"
                        )
                remaining = block.size - rounded
                if should_split(pool, remaining):
                    rest = Block(block.address + rounded, remaining, pool, block.segment, prev=block, next=block.next)
                    if block.next is not None:
                        block.next.prev = rest
                    block.next = rest
                    block.size = rounded
                    self.blocks[rest.address] = rest
                    self._cache(rest)
                block.allocated, block.requested = True, size
                return block.address
                ### END SOLUTION

            def free(self, address: int) -> None:
                """Return a live block to the cache, merged with its free neighbours."""
                # TODO: ValueError unless `address` is a live block (unknown, interior or already freed)
                # TODO: mark it free; merge with a free prev and a free next (uncache them, fix the links)
                # TODO: cache the merged block
                ### BEGIN SOLUTION
                block = self.blocks.get(address)
                if block is None:
                    raise ValueError(f"free({address:#x}): no block starts at this address (never allocated here?)")
                if not block.allocated:
                    raise ValueError(f"free({address:#x}): this block is not allocated (a double free?)")
                block.allocated, block.requested = False, 0
                following = block.next
                if following is not None and not following.allocated:  # absorb the free block after it
                    self._uncache(following)
                    block.size += following.size
                    block.next = following.next
                    if following.next is not None:
                        following.next.prev = block
                    del self.blocks[following.address]
                preceding = block.prev
                if preceding is not None and not preceding.allocated:  # the free block before absorbs it
                    self._uncache(preceding)
                    preceding.size += block.size
                    preceding.next = block.next
                    if block.next is not None:
                        block.next.prev = preceding
                    del self.blocks[block.address]
                    block = preceding
                self._cache(block)
                ### END SOLUTION

            def empty_cache(self) -> None:
                """Release every segment that is one single free block."""
                # TODO
                ### BEGIN SOLUTION
                for pool, free in self.free_lists.items():
                    for size, address in list(free):
                        block = self.blocks[address]
                        if block.prev is None and block.next is None:  # it spans its whole segment
                            self._uncache(block)
                            del self.blocks[address], self.segments[address]
                ### END SOLUTION

            def stats(self) -> dict[str, int]:
                """allocated, requested, reserved, fragmentation, largest_free, segments (bytes, or a count)."""
                # TODO
                ### BEGIN SOLUTION
                live = [block for block in self.blocks.values() if block.allocated]
                allocated = sum(block.size for block in live)
                reserved = sum(size for size, _ in self.segments.values())
                return {
                    "allocated": allocated,
                    "requested": sum(block.requested for block in live),
                    "reserved": reserved,
                    "fragmentation": reserved - allocated,
                    "largest_free": max((size for free in self.free_lists.values() for size, _ in free), default=0),
                    "segments": len(self.segments),
                }
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. A training step, replayed

        The helper below writes the allocation trace of a small decoder-only transformer's training steps from its
        shapes alone (no model runs): the forward pass keeps the activations that backward needs and frees its
        temporaries, the backward pass frees those activations layer by layer in reverse while it allocates
        gradient temporaries, the first step allocates the weight gradients and AdamW's two moments once and for
        all. Each step draws its own sequence length, as a data loader without packing does. Replaying it through
        your allocator shows where `reserved` and `allocated` part ways.
    """)
    lesson.code(r"""
        def training_trace(steps=6, layers=4, d_model=512, heads=8, vocab=8192, batch=4, seq_lens=(512,), bytes_per=2):
            '''[("malloc", name, bytes) | ("free", name)] of `steps` training steps with the given sequence lengths.'''
            events, live = [], set()
            def malloc(name, numel):
                events.append(("malloc", name, int(numel) * bytes_per)); live.add(name)
            def free(name):
                events.append(("free", name)); live.discard(name)
            weights = {"embed": vocab * d_model, "head": vocab * d_model}
            for layer in range(layers):
                weights |= {f"wqkv{layer}": 3 * d_model * d_model, f"wo{layer}": d_model * d_model,
                            f"w1_{layer}": 4 * d_model * d_model, f"w2_{layer}": 4 * d_model * d_model}
            for name, numel in weights.items():
                malloc(name, numel)
            for step in range(steps):
                T = seq_lens[step % len(seq_lens)]
                BT = batch * T
                malloc(f"x{step}", BT * d_model)
                for layer in range(layers):  # forward: keep what backward needs, free the temporaries
                    for name, numel in [("qkv", 3 * BT * d_model), ("scores", batch * heads * T * T),
                                        ("attn", BT * d_model), ("h1", 4 * BT * d_model), ("act", 4 * BT * d_model),
                                        ("out", BT * d_model)]:
                        malloc(f"{name}{step}.{layer}", numel)
                    free(f"scores{step}.{layer}")  # flash attention keeps only the log-sum-exp
                    malloc(f"lse{step}.{layer}", batch * heads * T * 2)
                malloc(f"logits{step}", BT * vocab)
                malloc(f"dlogits{step}", BT * vocab)
                free(f"logits{step}")
                for layer in reversed(range(layers)):  # backward: gradient temporaries in, activations out
                    malloc(f"dact{step}.{layer}", 4 * BT * d_model)
                    free(f"act{step}.{layer}"); free(f"h1{step}.{layer}"); free(f"out{step}.{layer}")
                    malloc(f"dscores{step}.{layer}", batch * heads * T * T)  # recomputed probabilities' gradient
                    free(f"dscores{step}.{layer}"); free(f"dact{step}.{layer}")
                    free(f"qkv{step}.{layer}"); free(f"attn{step}.{layer}"); free(f"lse{step}.{layer}")
                free(f"dlogits{step}"); free(f"x{step}")
                if step == 0:  # gradients and AdamW moments (fp32) live from the first step on
                    for name, numel in weights.items():
                        malloc(f"grad.{name}", numel)
                        malloc(f"m.{name}", 2 * numel); malloc(f"v.{name}", 2 * numel)
            return events


        def replay(allocator, events):
            '''Feed a trace to an allocator; the stats after every event.'''
            addresses, history = {}, []
            for event in events:
                if event[0] == "malloc":
                    addresses[event[1]] = allocator.malloc(event[2])
                else:
                    allocator.free(addresses.pop(event[1]))
                history.append(allocator.stats())
            return history


        fixed = replay(CachingAllocator(), training_trace(seq_lens=(512,)))
        varied = replay(CachingAllocator(), training_trace(seq_lens=(512, 384, 640, 448, 576, 320)))
        fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
        for ax, history, label in [(axes[0], fixed, "every step T = 512"), (axes[1], varied, "T varies: 512, 384, 640, ...")]:
            for key in ("reserved", "allocated", "requested"):
                ax.plot([h[key] / MiB for h in history], label=key)
            ax.set_title(label)
            ax.set_xlabel("allocator event")
            peak = max(h["allocated"] for h in history)
            ax.text(0.02, 0.9, f"peak allocated {peak / MiB:.0f} MiB, reserved {history[-1]['reserved'] / MiB:.0f} MiB",
                    transform=ax.transAxes, fontsize=8)
        axes[0].set_ylabel("MiB")
        axes[0].legend(loc="lower right")
        plt.tight_layout()
        plt.show()
        for label, history in [("fixed T", fixed), ("varied T", varied)]:
            end = history[-1]
            print(f"{label:>8}: end of training {end['allocated'] / MiB:7.1f} MiB allocated, "
                  f"{end['reserved'] / MiB:7.1f} MiB reserved, {end['segments']} segments, "
                  f"largest cached block {end['largest_free'] / MiB:.1f} MiB")
    """)
    lesson.md(r"""
        With one sequence length every step asks for the same sizes, so once the second step has run (the first
        had no gradients and optimizer moments alive yet) each request finds a cached block of the step before and
        `reserved` stays flat: 446 MiB for a peak of 414 MiB allocated in this run. With varying lengths a step
        longer than all before it cannot reuse the smaller cached blocks, reserves more, and leaves holes that a
        later, shorter step only partly fills: `reserved` climbs in stairs, to 504 MiB for a peak of 456 MiB. The
        gap between `allocated` and `requested` is the 512-byte rounding plus unsplit tails of large blocks: small
        here, because every tensor of this trace is large. The picture below maps the segments in the middle of a
        backward pass: each row a segment, dark blocks live, light ones cached.
    """)
    lesson.code(r"""
        def draw_segments(allocator, ax, title):
            rows = allocator.snapshot()
            for row, segment in enumerate(rows):
                for block in segment["blocks"]:
                    ax.broken_barh([((block["address"] - segment["address"]) / MiB, block["size"] / MiB)], (row - 0.4, 0.8),
                                   facecolors="tab:blue" if block["allocated"] else "#d6e6f5", edgecolor="white", linewidth=0.3)
            ax.set_yticks(range(len(rows)), [f"{s['pool']} {s['size'] // MiB} MiB" for s in rows], fontsize=7)
            ax.set_xlabel("offset in segment (MiB)")
            ax.set_title(title)


        allocator = CachingAllocator()
        addresses = {}
        events = training_trace(steps=3, seq_lens=(384, 640, 448))
        for event in events[: len(events) * 2 // 3]:  # stop in the middle of a step's backward pass
            if event[0] == "malloc":
                addresses[event[1]] = allocator.malloc(event[2])
            else:
                allocator.free(addresses.pop(event[1]))
        fig, ax = plt.subplots(figsize=(10, 0.2 * len(allocator.snapshot()) + 1.2))
        stats = allocator.stats()
        draw_segments(allocator, ax, f"mid-backward: {stats['allocated'] / MiB:.0f} MiB allocated of "
                                     f"{stats['reserved'] / MiB:.0f} MiB reserved (dark: live, light: cached)")
        plt.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ### Out of memory with memory to spare

        Fragmentation bites when the device is full. Below, a 64 MiB device holds nine 6 MiB tensors, three per
        20 MiB segment (each 6 MiB request is below 10 MiB, so a miss reserves 20 MiB). Freeing every other tensor
        leaves 36 MiB cached and free, and 4 MiB the device never handed out, yet a 12 MiB request fails: no cached
        piece is larger than 8 MiB, every segment still holds a live tensor so `empty_cache` cannot release it, and
        a fresh 12 MiB segment does not fit in the 4 MiB left.
    """)
    lesson.code(r"""
        device = CachingAllocator(capacity=64 * MiB)
        big = [device.malloc(6 * MiB) for _ in range(9)]
        for address in big[::2]:
            device.free(address)
        print({key: f"{value / MiB:.1f} MiB" if key != "segments" else value for key, value in device.stats().items()})
        try:
            device.malloc(12 * MiB)
        except MemoryError as error:
            print("MemoryError:", error)
    """)
    lesson.md(r"""
        ### On a GPU: PyTorch's allocator next to yours

        With CUDA, the cell below replays the fixed-length trace through `torch.empty(..., dtype=torch.uint8,
        device="cuda")` and prints PyTorch's `memory_stats` next to your allocator's statistics at the end and at the
        peak. They should agree on `allocated` and `requested` exactly and on `reserved` closely; PyTorch may differ
        where it uses options your model does not have (`expandable_segments`, `max_split_size_mb`,
        `roundup_power2_divisions` in `PYTORCH_CUDA_ALLOC_CONF`) or where other tensors (CUDA context, cuBLAS
        workspaces) already sit in the pools. Reported, not asserted.

        **Not measured by the course yet**: the GPU run did not record this cell's output, so there is no H200 table to
        quote. What to expect, reasoned from the rules above rather than measured: `allocated` and `requested` equal to
        the byte, at the end and at the peak, because both allocators apply the same 512-byte rounding and the same
        split rule to the same requests on one stream, and `requested` is the sum of the sizes asked for whatever the
        allocator does; `reserved` equal too, as long as `PYTORCH_CUDA_ALLOC_CONF` is unset (the cell calls
        `empty_cache` first so that segments cached by earlier work do not serve the trace). The peak rows are not
        relative to the start: tensors that other code in the same process keeps alive on the GPU add to PyTorch's
        column. A difference in `allocated` on a fresh kernel would mean the model gets a sizing or split rule wrong;
        that is worth reporting.
    """)
    lesson.code(r"""
        if torch.cuda.is_available():
            events = training_trace(steps=3, seq_lens=(512, 384, 640))
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_stats()
            tensors, ours = {}, CachingAllocator()
            history = replay(ours, events)
            for event in events:
                if event[0] == "malloc":
                    tensors[event[1]] = torch.empty(event[2], dtype=torch.uint8, device="cuda")
                else:
                    del tensors[event[1]]
            torch.cuda.synchronize()
            real = torch.cuda.memory_stats()
            rows = [("allocated (end)", real["allocated_bytes.all.current"] - base["allocated_bytes.all.current"], history[-1]["allocated"]),
                    ("requested (end)", real["requested_bytes.all.current"] - base["requested_bytes.all.current"], history[-1]["requested"]),
                    ("reserved (end)", real["reserved_bytes.all.current"] - base["reserved_bytes.all.current"], history[-1]["reserved"]),
                    ("allocated (peak)", real["allocated_bytes.all.peak"], max(h["allocated"] for h in history)),
                    ("reserved (peak)", real["reserved_bytes.all.peak"], max(h["reserved"] for h in history))]
            print(f"{'stat':<18} {'torch (MiB)':>12} {'yours (MiB)':>12}")
            for name, theirs, mine in rows:
                print(f"{name:<18} {theirs / MiB:12.2f} {mine / MiB:12.2f}")
            del tensors
        else:
            print("No CUDA device here: this comparison runs on a GPU.")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`sizing_rules`.** `(size + 511) // 512 * 512` is the integer ceiling; a floor would hand out blocks smaller
        than asked for, and the first write past them lands in a neighbour's tensor (on a GPU: silent corruption,
        not a crash). The pool is chosen from the *rounded* size, as PyTorch does (`get_pool(size)` after
        `round_size`); since 1 MiB is a multiple of 512 this never changes the answer, but `<` instead of `<=` at
        exactly 1 MiB does. The split rule is asymmetric on purpose: small blocks are cheap to track and small
        requests are many, so any 512-byte tail is worth keeping; a large block is cut only when the tail is itself a
        large-pool-sized block, otherwise the large pool would fill with slivers that no large request can use.
        `bool` is a subclass of `int` in Python, hence its explicit refusal.

        **`CachingAllocator`.** Best fit is a `bisect_left` for `(rounded, -1)`: the first entry whose size is at
        least `rounded`, and among equal sizes the lowest address because the tuples compare addresses second. It
        is $O(\log n)$ to find and $O(n)$ to update a Python list (PyTorch's `std::set` is $O(\log n)$ for both).
        The usual mistakes: *first fit instead of best fit* (valid, but it cuts the big
        block where a small one would do: the returned addresses differ from the reference), *searching the other
        pool*, *splitting a large block for a sliver*, *keeping the free remainder out of the cache* (a leak that
        `empty_cache` cannot recover), *merging only with the next neighbour* (two adjacent free blocks: the
        invariant checker names them), *`empty_cache` that releases segments with live blocks*, *no retry after
        `empty_cache`* (a spurious out-of-memory), *a double free that is accepted* (in C++ it puts the same block in
        the cache twice, and two tensors later share memory), and *fragmentation computed from `requested`*.

        Cost: `malloc` and `free` do $O(\log n)$ comparisons plus list updates, with $n$ the number of cached blocks;
        `stats` here scans every block, where PyTorch keeps running counters (`current`, `peak`, per pool).

        ## 7. What PyTorch does beyond this model

        - **Streams.** Every block remembers the stream it was allocated on and is reused only on that stream; a
          tensor used on another stream must be `record_stream`-ed, and its block returns to the cache only when the
          recorded CUDA events have completed (`p04.streams`). The free-list key is (stream, size, address).
        - **`PYTORCH_CUDA_ALLOC_CONF`.** `max_split_size_mb` stops large blocks above a size from being split
          (fewer slivers, more segments); `roundup_power2_divisions` rounds requests to powers of two cut in $k$
          steps, so that varying sequence lengths reuse the same blocks; `garbage_collection_threshold` frees cached
          blocks before reaching the limit.
        - **Expandable segments** (`expandable_segments:True`): one segment per stream that grows by mapping new
          physical pages (`cuMemCreate`/`cuMemMap`) into a large reserved virtual range. A growing tensor no longer
          needs one contiguous free piece of physical memory, which removes most of the fragmentation above.
        - **Diagnostics.** `torch.cuda.memory_summary()` prints these stats per pool;
          `torch.cuda.memory._record_memory_history()` plus `_dump_snapshot` records every allocation with its
          stack, and the viewer at pytorch.org/memory_viz draws the segment map you drew above.
        - **Other allocators.** vLLM and SGLang sidestep the problem for the KV cache: they reserve one large tensor
          at start-up and manage fixed-size pages in it (`p02.paged_attention`), so the caching allocator only sees
          the model's activations. JAX's XLA runtime preallocates 75% of the GPU by default and uses a best-fit
          allocator with coalescing (BFC, from TensorFlow) over it.
    """)
    lesson.mistakes()
    return lesson
