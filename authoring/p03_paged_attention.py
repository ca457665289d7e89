"""Source of 03_Triton_Kernels/15_Paged_Attention.ipynb (build with `python -m llm_algo build p03.paged_attention`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.paged_attention",
        path="03_Triton_Kernels/15_Paged_Attention.ipynb",
        title_en="Paged decode attention in Triton",
        title_zh="分页解码注意力：Triton 实现",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p03.decode_attention", "p02.paged_attention"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        A serving engine does not keep one contiguous `(S, H_kv, d)` cache per sequence: it would have to reserve the
        maximum length for every request, and most of that memory would hold nothing (`p02.paged_attention` measured
        it). vLLM's PagedAttention (Kwon et al., SOSP 2023) stores keys and values in a **pool** of fixed-size blocks
        (pages) and gives each sequence a **block table**: entry $j$ is the physical block that holds its tokens
        $j \cdot bs \ldots (j+1) \cdot bs - 1$. Blocks are allocated as a sequence grows, freed when it ends, and shared
        between sequences with a common prefix. The price is paid in the attention kernel: the keys of one sequence are
        scattered over the pool, so the kernel must look up every block's address before it can load it.

        **You will implement** the split-K decode kernel of `p03.decode_attention` reading K/V through the block table
        (块表): the gather happens *inside* the kernel, one table lookup per key row, with no copy of the cache. The
        second stage (the combine of the split states) and the split rule are reused from the previous lesson.
        **Graded against** `F.scaled_dot_product_attention` in float64 on the gathered cache, float64 partial states,
        and the contiguous kernel of `p03.decode_attention` on the same data scattered into random blocks, with unused
        table entries and blocks shared by several sequences; guard bytes around every output, NaN in every pool slot
        a correct kernel never reads.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：服务引擎把 K/V 存在固定大小的块（page）组成的池中，池形状 `(num_blocks, block_size, H_kv, d)`；每条序列有一张块表 `block_tables[b, j]`，给出其第 $j$ 个逻辑块所在的物理块。注意力内核必须先查表，再读 K/V。
        - **做法**：沿用上一课的 split-K 解码内核，只改地址计算：第 $t$ 个 key 位于物理块 `block_tables[b, t // bs]` 的槽位 `t % bs`；每行 key 查一次表（表项很小，读一次即可），然后按 `page * stride_block + slot * stride_slot + kv_head * stride_head` 读取。
        - **正确性**：只读取 $t <$ `seq_lens[b]` 对应的表项；表的尾部未使用项可以是 -1 或垃圾值，绝不能被读到。多条序列可以共享同一个前缀块。
        - **int64**：池是整个 GPU 上最大的张量（几十 GB），`page * stride_block` 必须用 int64 计算。
        - **性能目标**：与连续 cache 的内核相差不超过 10%：查表只增加极少的字节（每 key 4 字节对比每 key $2\cdot 2\cdot H_{kv}\cdot d$ 字节的 K/V），每行 key 仍是连续的 $d$ 个元素。
        - **实测（H200，一次运行）**：batch 8、32k token、16 token 一页时，分页内核 0.2612 ms（4111 GB/s），连续 cache 内核 0.2619 ms（4100 GB/s），差距不到 0.3%，10% 的目标达成；二者都达到拷贝带宽（4146 GB/s）的 99%。
        - **坏输入**：使用中的表项越界（$<0$ 或 $\ge$ num_blocks）、块表长度不足以容纳 `seq_lens`，在主机端拒绝（`validate=True`）。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The layout

        vLLM's pools (the layout FlashAttention's `flash_attn_with_kvcache(block_table=...)` also reads):

        | tensor | shape | dtype |
        |---|---|---|
        | `key_cache`, `value_cache` | `(num_blocks, block_size, H_kv, d)` | fp16 / bf16 |
        | `block_tables` | `(B, max_blocks)` | int32 |
        | `seq_lens` | `(B,)` | int32 |

        Token $t$ of sequence $b$ lives at `key_cache[block_tables[b, t // bs], t % bs, h_kv, :]`. Only the first
        $\lceil \text{seq\_len}_b / bs \rceil$ entries of a table row mean anything; the rest are padding (vLLM pads with
        0, our checks with -1 or with ids past the pool, so that reading them is caught). Two sequences forked from one
        prompt hold the same block ids for their shared prefix.

        **What changes in the kernel.** In `p03.decode_attention` the key tile of block start $n$ was one strided
        rectangle: `k_base + (n + offs_n) * stride_kn`. Now every row of the tile has its own base address:

        ```
        keys  = n + offs_n                                    # (BLOCK_N,) logical token positions
        page  = load(block_tables[b, keys // bs])             # (BLOCK_N,) physical block of each row (masked)
        slot  = keys % bs
        k     = load(k_ptr + page·stride_block + slot·stride_slot + h_kv·stride_head + offs_d)   # (BLOCK_N, d)
        ```

        Each row is still $d$ contiguous elements (256 bytes at $d = 128$ in bf16), so the loads stay coalesced; the
        tile is just no longer a rectangle of memory. `BLOCK_N` need not equal the page size: a 64-key tile over pages
        of 16 tokens touches 4 pages, and the per-row lookup reads the same 4 table entries 16 times each (from L1).
        This is how SGLang's and vLLM's Triton decode kernels gather (a page index per token); vLLM's CUDA kernel
        instead gives each warp whole pages.

        **Cost of the indirection.** 4 bytes of table per key against $2 \cdot 2 \cdot H_{kv} \cdot d = 4096$ bytes of
        K/V per key (Llama-3-8B, per layer): 0.1% more traffic. The real cost is latency: the K load depends on the
        table load, so the pipeline needs the table entries of the *next* tiles early; Triton's software pipelining
        (`num_stages`) issues them ahead like any other load. The goal of this lesson is to stay within 10% of the
        contiguous kernel.

        **int64.** The pool is the largest tensor in a serving process: vLLM gives the KV cache most of the GPU's free
        memory, tens of GB. With Llama-3-8B's 8 KV heads, $d = 128$ and 16-token pages, one block is
        $16 \cdot 8 \cdot 128 = 2^{14}$ elements, so `page * stride_block` passes $2^{31}$ from block 131072 on — a
        4 GiB pool per layer in bf16. Cast the page ids to int64 before multiplying.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import numpy as np
        import torch
        import torch.nn.functional as F
        import triton
        import triton.language as tl

        LN2 = tl.constexpr(0.6931471805599453)  # base-2 max -> natural log (kernels may read only constexpr globals)

        decode_attention, combine_splits, choose_num_splits = lesson.use(
            "p03.decode_attention", "decode_attention", "combine_splits", "choose_num_splits"
        )
    """)
    lesson.code(r"""
        # A pool of 24 blocks of 4 tokens, 3 sequences: 0 and 1 share a 2-block prompt, 2 is separate.
        rng = np.random.default_rng(0)
        lengths = [13, 10, 6]
        owner = np.full(24, -1)
        free = [int(x) for x in rng.permutation(24)]
        prompt = [free.pop(), free.pop()]
        tables = []
        for seq, n in enumerate(lengths):
            own = prompt[:] if seq < 2 else []
            while len(own) * 4 < n:
                own.append(free.pop())
            tables.append(own)
            for j, blk in enumerate(own):
                owner[blk] = 3 if (seq < 2 and j < 2) else seq
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 2.8), gridspec_kw={"width_ratios": [3, 2]})
        colors = plt.matplotlib.colors.ListedColormap(["white", "tab:blue", "tab:orange", "tab:green", "tab:purple"])
        left.imshow((owner + 1)[None, :], cmap=colors, vmin=0, vmax=4, aspect="auto")
        left.set_yticks([]); left.set_xticks(range(24)); left.set_xlabel("physical block id in the pool")
        left.set_title("pool: blue/orange/green = sequence 0/1/2, purple = shared prompt", fontsize=9)
        right.axis("off")
        text = "\n".join(f"seq {s} (len {n:2d}): table {t} + padding" for s, (n, t) in enumerate(zip(lengths, tables)))
        right.text(0, 0.5, text, family="monospace", fontsize=8, va="center")
        fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 2. Exercise `paged_decode_partials`

        Stage 1 over the pools. Same grid `(n_splits, B, H_kv)`, same outputs `(m, l, acc)` in the layout of
        `p03.decode_attention` (so its `combine_splits` merges them), same online softmax; only the addresses change.

        `paged_decode_partials(q, key_cache, value_cache, block_tables, seq_lens, split_size, sm_scale=None,
        block_n=None, validate=True)`:

        - `q` `(B, H_q, d)`; pools `(num_blocks, block_size, H_kv, d)`, fp16 or bf16, head dim contiguous, any
          `block_size` $\ge 1$, every other stride free (q a slice of a fused QKV, each pool its own window);
          `block_tables` `(B, max_blocks)` int32 or int64, any row stride, entries contiguous; `seq_lens` `(B,)` int32
          or int64, any stride (the kernel reads `seq_lens_ptr + b`: the launcher passes `seq_lens.contiguous()`).
        - `split_size` a positive multiple of `block_n` (64 on a GPU, 16 on the interpreter). The cache length the
          splits cover is `max_blocks * block_size`.
        - `validate=True` also reads the lengths and the used table entries back to the host and refuses (ValueError)
          a length outside $[1, \text{max\_blocks} \cdot bs]$ or a used entry outside $[0, \text{num\_blocks})$. This
          is the cheap place to catch a corrupt table — inside the kernel a bad id is an out-of-bounds read of another
          request's cache, or a crash. A serving engine builds the tables itself and skips the check
          (`validate=False`, what the benchmark does).
    """)
    lesson.exercise(
        "paged_decode_partials",
        r'''
        @triton.jit
        def paged_split_kernel(
            q_ptr, k_ptr, v_ptr, block_tables_ptr, seq_lens_ptr, m_ptr, l_ptr, acc_ptr,
            stride_qb, stride_qh,                            # q (B, H_q, d)
            stride_kblock, stride_kslot, stride_kh,          # key_cache (num_blocks, block_size, H_kv, d)
            stride_vblock, stride_vslot, stride_vh,          # value_cache, same shape
            stride_tb,                                       # block_tables (B, max_blocks), entries contiguous
            num_heads, num_kv_heads, num_splits, split_size, qk_scale,   # qk_scale = sm_scale * log2(e)
            HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
        ):
            """p03.decode_attention's decode_split_kernel, reading key t of sequence b from
            pool[block_tables[b, t // PAGE_SIZE], t % PAGE_SIZE, kv_head, :]."""
            # TODO: as in decode_split_kernel: ids, the group's query heads, q, the split's range [start, end)
            # TODO: per tile of BLOCK_N keys: the page of each key row (masked table load), its slot, the row
            #       addresses (page as int64), masked K/V loads, online softmax
            # TODO: store m * ln 2, l, acc as in decode_split_kernel
            ### BEGIN SOLUTION
            split = tl.program_id(0)
            batch = tl.program_id(1).to(tl.int64)
            kv_head = tl.program_id(2).to(tl.int64)
            group = num_heads // num_kv_heads
            offs_g = tl.arange(0, BLOCK_G)
            offs_n = tl.arange(0, BLOCK_N)
            offs_d = tl.arange(0, HEAD_DIM)
            heads = kv_head * group + offs_g
            head_ok = offs_g < group
            q = tl.load(q_ptr + batch * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                        mask=head_ok[:, None], other=0.0)                              # (BLOCK_G, HEAD_DIM)

            seq_len = tl.load(seq_lens_ptr + batch).to(tl.int32)
            start = split * split_size
            end = tl.minimum(start + split_size, seq_len)
            table = block_tables_ptr + batch * stride_tb
            k_head = k_ptr + kv_head * stride_kh
            v_head = v_ptr + kv_head * stride_vh

            m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_G], tl.float32)
            acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
            for n in tl.range(start, end, BLOCK_N):
                keys = n + offs_n                                                     # (BLOCK_N,) logical positions
                key_ok = keys < end
                page = tl.load(table + keys // PAGE_SIZE, mask=key_ok, other=0).to(tl.int64)
                slot = (keys % PAGE_SIZE).to(tl.int64)
                k_rows = k_head + page * stride_kblock + slot * stride_kslot              # (BLOCK_N,) row pointers
                v_rows = v_head + page * stride_vblock + slot * stride_vslot
                k = tl.load(k_rows[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0.0)
                x = tl.dot(q, tl.trans(k)) * qk_scale                                 # (BLOCK_G, BLOCK_N), base 2
                x = tl.where(key_ok[None, :], x, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(x, axis=1))
                alpha = tl.exp2(m_i - m_new)
                p = tl.exp2(x - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                v = tl.load(v_rows[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0.0)
                acc = acc * alpha[:, None]
                acc = tl.dot(p.to(v.dtype), v, acc)
                m_i = m_new

            rows = (batch * num_heads + heads) * num_splits + split
            tl.store(m_ptr + rows, m_i * LN2, mask=head_ok)
            tl.store(l_ptr + rows, l_i, mask=head_ok)
            tl.store(acc_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=head_ok[:, None])
            ### END SOLUTION


        def check_paged_inputs(q, key_cache, value_cache, block_tables, seq_lens, validate=True):
            """Raise ValueError on anything the paged kernel cannot handle (with validate: lengths and used table
            entries, read back to the host)."""
            # TODO: dims, dtypes, shapes, GQA divisibility, head_dim, strides, table and lengths dtypes/shapes/devices
            # TODO: if validate: 1 <= seq_lens <= max_blocks * bs; used entries (j < ceil(len / bs)) in [0, num_blocks)
            ### BEGIN SOLUTION
            if q.dim() != 3 or key_cache.dim() != 4 or value_cache.dim() != 4:
                raise ValueError("q must be (B, H_q, d) and the pools (num_blocks, block_size, H_kv, d)")
            batch, num_heads, head_dim = q.shape
            num_blocks, block_size, num_kv_heads, _ = key_cache.shape
            if q.dtype not in (torch.float16, torch.bfloat16) or key_cache.dtype != q.dtype or value_cache.dtype != q.dtype:
                raise ValueError(f"q and the pools must share one 16-bit dtype, got {q.dtype}, {key_cache.dtype}, "
                                 f"{value_cache.dtype}")
            if key_cache.shape != value_cache.shape or key_cache.shape[3] != head_dim:
                raise ValueError(f"the pools must be (num_blocks, block_size, H_kv, {head_dim}), got "
                                 f"{tuple(key_cache.shape)} and {tuple(value_cache.shape)}")
            if num_heads % num_kv_heads != 0:
                raise ValueError(f"{num_heads} query heads cannot be split into groups over {num_kv_heads} KV heads")
            if head_dim not in (16, 32, 64, 128):
                raise ValueError(f"head_dim {head_dim} is not supported (16, 32, 64 or 128)")
            if q.stride(2) != 1 or key_cache.stride(3) != 1 or value_cache.stride(3) != 1:
                raise ValueError("the head dimension must be contiguous (stride 1)")
            if block_tables.dim() != 2 or block_tables.shape[0] != batch or block_tables.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"block_tables must be a ({batch}, max_blocks) int32/int64 tensor, got "
                                 f"{tuple(block_tables.shape)} {block_tables.dtype}")
            if block_tables.stride(1) != 1:
                raise ValueError("the entries of a block table row must be contiguous")
            if seq_lens.shape != (batch,) or seq_lens.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"seq_lens must be a ({batch},) int32/int64 tensor, got {tuple(seq_lens.shape)} "
                                 f"{seq_lens.dtype}")
            if seq_lens.device != q.device or block_tables.device != q.device:
                raise ValueError("seq_lens and block_tables must be on q's device")
            if validate and len(seq_lens):
                capacity = block_tables.shape[1] * block_size
                low, high = int(seq_lens.min()), int(seq_lens.max())
                if low < 1 or high > capacity:
                    raise ValueError(f"seq_lens must lie in [1, {capacity}] (max_blocks * block_size), got [{low}, {high}]")
                used = torch.arange(block_tables.shape[1], device=q.device) < (seq_lens[:, None] + block_size - 1) // block_size
                entries = block_tables[used]
                outside = (entries < 0) | (entries >= num_blocks)
                if bool(outside.any()):
                    raise ValueError(f"block table entry {int(entries[outside][0])} is outside the pool of {num_blocks} "
                                     "blocks")
            ### END SOLUTION


        def paged_decode_partials(q, key_cache, value_cache, block_tables, seq_lens, split_size, sm_scale=None,
                                  block_n=None, validate=True):
            """Stage 1 over paged pools. Returns m, l (B, H_q, n_splits) and acc (B, H_q, n_splits, d), float32, with
            n_splits = ceil(max_blocks * block_size / split_size)."""
            # TODO 1: check_paged_inputs; block_n (64 on a GPU, 16 on the interpreter); split_size a multiple of it
            # TODO 2: allocate m, l, acc; grid (n_splits, B, H_kv); launch with PAGE_SIZE = block_size (seq_lens
            #         contiguous: the kernel reads seq_lens_ptr + b)
            ### BEGIN SOLUTION
            check_paged_inputs(q, key_cache, value_cache, block_tables, seq_lens, validate)
            seq_lens = seq_lens.contiguous()                                          # a strided view: copied
            batch, num_heads, head_dim = q.shape
            _, block_size, num_kv_heads, _ = key_cache.shape
            block_n = block_n or (64 if q.is_cuda else 16)
            if split_size <= 0 or split_size % block_n != 0:
                raise ValueError(f"split_size {split_size} must be a positive multiple of block_n = {block_n}")
            num_splits = triton.cdiv(block_tables.shape[1] * block_size, split_size)
            sm_scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
            group = num_heads // num_kv_heads
            m = torch.empty(batch, num_heads, num_splits, device=q.device, dtype=torch.float32)
            l = torch.empty_like(m)
            acc = torch.empty(batch, num_heads, num_splits, head_dim, device=q.device, dtype=torch.float32)
            extra = {"num_warps": 4, "num_stages": 3} if q.is_cuda else {}
            paged_split_kernel[(num_splits, batch, num_kv_heads)](
                q, key_cache, value_cache, block_tables, seq_lens, m, l, acc,
                q.stride(0), q.stride(1),
                key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
                value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
                block_tables.stride(0),
                num_heads, num_kv_heads, num_splits, split_size, sm_scale * math.log2(math.e),
                HEAD_DIM=head_dim, PAGE_SIZE=block_size, BLOCK_G=max(16, triton.next_power_of_2(group)),
                BLOCK_N=block_n, **extra,
            )
            return m, l, acc
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 3. Exercise `paged_decode_attention`

        The wrapper: `paged_decode_attention(q, key_cache, value_cache, block_tables, seq_lens, sm_scale=None,
        num_splits=None, validate=True)` returns `(out (B, H_q, d) in q.dtype, lse (B, H_q) float32)`. Reuse
        `choose_num_splits` (with the table's capacity `max_blocks * block_size` as the cache length, the SM count of
        the GPU or 8 on the interpreter) and `combine_splits` from `p03.decode_attention` (already loaded above);
        refuse `num_splits < 1`. With the same `num_splits` and the same data, the result must equal
        `decode_attention` on the contiguous cache: the checks scatter one cache into random blocks and compare.
    """)
    lesson.exercise(
        "paged_decode_attention",
        r'''
        def paged_decode_attention(q, key_cache, value_cache, block_tables, seq_lens, sm_scale=None, num_splits=None,
                                   validate=True):
            """Split-K decode attention over paged pools. Returns out (B, H_q, d) in q.dtype and lse (B, H_q)."""
            # TODO 1: check the inputs; num_splits >= 1 when given, else choose_num_splits
            # TODO 2: split_size a multiple of BLOCK_N covering max_blocks * block_size keys in num_splits slices
            # TODO 3: paged_decode_partials (validate=False: already checked), then combine_splits into q's dtype
            ### BEGIN SOLUTION
            check_paged_inputs(q, key_cache, value_cache, block_tables, seq_lens, validate)
            if num_splits is not None and num_splits < 1:
                raise ValueError(f"num_splits must be >= 1, got {num_splits}")
            batch = q.shape[0]
            _, block_size, num_kv_heads, _ = key_cache.shape
            capacity = block_tables.shape[1] * block_size
            block_n = 64 if q.is_cuda else 16
            if num_splits is None:
                num_sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 8
                num_splits = choose_num_splits(batch, num_kv_heads, capacity, num_sms)
            split_size = triton.cdiv(triton.cdiv(capacity, num_splits), block_n) * block_n
            m, l, acc = paged_decode_partials(q, key_cache, value_cache, block_tables, seq_lens, split_size, sm_scale,
                                              block_n, validate=False)
            return combine_splits(m, l, acc, out_dtype=q.dtype)
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### Paged and contiguous, side by side

        One cache of 3 sequences written contiguously and also scattered into a shuffled pool of 16-token blocks;
        both kernels on the same data, and the difference.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        bs_demo, lens_demo = 16, [200, 37, 128]
        k_demo, v_demo = (torch.randn(3, 2, 208, 32, device=DEVICE).half() for _ in range(2))
        q_demo = torch.randn(3, 8, 32, device=DEVICE).half()
        order = torch.randperm(3 * 13)
        tables_demo = order.view(3, 13).to(DEVICE, torch.int32)
        pool_k = torch.empty(39, bs_demo, 2, 32, device=DEVICE).half()
        pool_v = torch.empty_like(pool_k)
        for b in range(3):
            pool_k[tables_demo[b].long()] = k_demo[b].transpose(0, 1).reshape(13, bs_demo, 2, 32)
            pool_v[tables_demo[b].long()] = v_demo[b].transpose(0, 1).reshape(13, bs_demo, 2, 32)
        seq_lens_demo = torch.tensor(lens_demo, device=DEVICE, dtype=torch.int32)
        try:
            paged_out, _ = paged_decode_attention(q_demo, pool_k, pool_v, tables_demo, seq_lens_demo, num_splits=4)
        except NotImplementedError:
            print("Implement paged_decode_partials and paged_decode_attention first.")
        else:
            contiguous_out, _ = decode_attention(q_demo, k_demo, v_demo, seq_lens_demo, num_splits=4)
            diff = (paged_out.float() - contiguous_out.float()).abs()
            fig, ax = plt.subplots(figsize=(6, 2.6))
            ax.imshow(tables_demo.cpu(), cmap="tab20", aspect="auto")
            ax.set_xlabel("logical block j"); ax.set_ylabel("sequence"); ax.set_title("block tables (colour = physical id)")
            fig.tight_layout(); plt.show()
            print(f"max |paged - contiguous| = {float(diff.max()):.1e}")
    """)
    lesson.md(r"""
        ## 4. Speed (GPU only)

        `python -m llm_algo bench p03.paged_attention` runs, in one process on the same data (Llama-3-8B heads, bf16,
        batch 8, 32768 tokens per sequence, 16-token blocks in a shuffled pool): your paged kernel, the contiguous
        `decode_attention` of the previous lesson (both with `do_bench` and from a CUDA graph), SDPA's default backend
        on the contiguous cache, and the copy roofline; all in GB/s of K+V bytes. The goal: paged within 10% of
        contiguous.

        **Reading the numbers** (one run of `python -m llm_algo bench p03.paged_attention` with the reference
        solutions on an NVIDIA H200, Triton 3.6, torch 2.11, CUDA 13.0; your GPU will differ). Batch 8, 32768 tokens
        each, 16-token pages, GB/s of K+V bytes (1 GiB):

        | row | ms | GB/s |
        |---|---|---|
        | `paged_decode_attention` | 0.2612 | 4111 |
        | `paged_decode_attention`, CUDA graph | 0.2501 | 4293 |
        | `decode_attention`, contiguous (`p03.decode_attention`) | 0.2619 | 4100 |
        | `decode_attention`, contiguous, CUDA graph | 0.2495 | 4304 |
        | SDPA default backend (`enable_gqa`), contiguous | 0.2522 | 4258 |
        | device-to-device copy (512 MiB read, 512 MiB written) | 0.2590 | 4146 |

        The goal is met with room to spare. The paged kernel is within 0.3% of the contiguous one either way it is
        timed (0.2612 against 0.2619 ms plain, 0.2501 against 0.2495 ms from a graph), a difference too small to read
        anything into from one run, and it reads the pool at 99% of the copy's bandwidth. SDPA on the contiguous cache
        is 3.5% faster than both. The page-table lookup costs nothing measurable here, for three reasons. Each key row
        is still one contiguous 256-byte segment ($d = 128$ in bf16) in either layout, so HBM sees transfers of the
        same size. The table adds 4 bytes per key to each program's traffic, against the 512 bytes of K and V it loads
        for that key. And the latency of the dependent table load is likely hidden by the other programs in flight:
        the grid has about 1000 of them. This run did not profile that. If a GPU or page size shows a gap, the first
        knobs are larger tiles (`BLOCK_N = 128`) or pages of 32 or 64 tokens (fewer page boundaries per tile). vLLM's
        default on GPUs is 16 tokens, while FlashAttention-2's paged path asks for pages of a multiple of 256 tokens.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solution

        **`paged_split_kernel`.** Compared with `decode_split_kernel`, three lines change: the page of each key row
        (`tl.load(table + keys // PAGE_SIZE, mask=key_ok, other=0)`), its slot (`keys % PAGE_SIZE`), and row pointers
        `k_head + page * stride_kblock + slot * stride_kslot` instead of `k_base + keys * stride_kn`. The table load is
        masked with the same `key_ok` as the K/V loads, so the padding entries of a table row — -1, or ids past the
        pool — are never read, let alone followed. `PAGE_SIZE` is a `tl.constexpr`, so `// PAGE_SIZE` and `% PAGE_SIZE`
        compile to shifts and masks for the usual powers of two (and still work for any other size).

        **`check_paged_inputs`.** The used entries of each row are the first $\lceil \text{len} / bs \rceil$; the mask
        `arange(max_blocks) < ceil(len / bs)` selects them all at once. It costs one synchronisation, which a scheduler
        that builds the tables itself does not need — hence `validate=False` in the benchmark.

        **The usual mistakes, and why they are wrong**: the slot taken as
        `keys // PAGE_SIZE` or the page as `keys % PAGE_SIZE` (swapped), the table read without a mask (padding
        entries followed: out of bounds), the table of sequence 0 used for every sequence (a missing
        `batch * stride_tb`), the logical position used directly as the pool row (no gather at all), the pool's head
        stride ignored, the validation that checks every entry instead of the used ones (refuses valid tables
        with padding) or none.

        **In production.** vLLM's V1 Triton attention backend and SGLang's `decode_attention.py` gather K/V per token
        through `req_to_token`/block tables exactly like this; vLLM's CUDA `paged_attention_v1/v2` kernels and
        FlashInfer's decode kernels assign warps to whole pages and prefetch the table; FlashAttention's
        `flash_attn_with_kvcache(block_table=...)` pages inside its split-KV kernel. Prefix sharing needs nothing from
        the kernel: two table rows holding the same ids simply read the same memory.
    """)
    lesson.mistakes()
    return lesson
