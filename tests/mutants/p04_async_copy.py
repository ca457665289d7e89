"""Realistic wrong versions of the p04.async_copy solutions; every one must be rejected by a check.

The mutants of `async_gemm_cuda` are C++ that still compiles (only its meaning is broken), so that on a GPU they are
rejected by a check and not by nvcc; on a CPU their checks read *needs a GPU*."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # pipeline_schedule
    Mutant(
        "pipeline_schedule",
        "wait_one_group_too_few",
        "waits until stages - 1 groups are pending instead of stages - 2: tile t is still in flight when computed",
        [('events.append(("wait", stages - 2))', 'events.append(("wait", stages - 1))')],
        mistake_zh="等到只剩 stages - 1 组而不是 stages - 2 组挂起：计算分块 t 时它还在传输中",
    ),
    Mutant(
        "pipeline_schedule",
        "prefetch_before_barrier",
        "issues the prefetch before the step's barrier: it overwrites the slot of tile t - 1 while a slower warp "
        "still reads it (WAR)",
        [
            (
                '        events.append(("wait", stages - 2))  # my copies of this tile have landed\n'
                '        events.append(("sync",))  # everyone\'s have, and everyone finished the previous tile\n'
                "        ahead = tile + stages - 1\n"
                "        if ahead < num_tiles:\n"
                '            events.append(("load", ahead, ahead % stages))  # the slot of tile - 1, free since the sync\n',
                "        ahead = tile + stages - 1\n"
                "        if ahead < num_tiles:\n"
                '            events.append(("load", ahead, ahead % stages))\n'
                '        events.append(("wait", stages - 2))\n'
                '        events.append(("sync",))\n',
            )
        ],
        mistake_zh="在本步的屏障之前发起预取：覆盖了分块 t - 1 的槽位，而较慢的 warp 还在读它（WAR）",
    ),
    Mutant(
        "pipeline_schedule",
        "no_empty_commits",
        "commits only after a load: at the tail wait(stages - 2) no longer covers the last tiles",
        [
            (
                '            events.append(("load", ahead, ahead % stages))  # the slot of tile - 1, free since the sync\n'
                '        events.append(("commit",))  # possibly empty: group g keeps holding tile g\n',
                '            events.append(("load", ahead, ahead % stages))\n            events.append(("commit",))\n',
            )
        ],
        mistake_zh="只在加载之后才提交：到了尾部 wait(stages - 2) 不再覆盖最后几个分块",
    ),
    Mutant(
        "pipeline_schedule",
        "wait_all_every_step",
        "waits for all groups (wait 0) every step: correct, but the pipeline drains and nothing overlaps",
        [('events.append(("wait", stages - 2))', 'events.append(("wait", 0))')],
        mistake_zh="每一步都等待所有组（wait 0）：结果正确，但流水线被排空，什么都没有重叠",
    ),
    Mutant(
        "pipeline_schedule",
        "prefetch_into_current_slot",
        "prefetches tile t + stages - 1 into slot t % stages: the tile about to be computed is overwritten",
        [('events.append(("load", ahead, ahead % stages))', 'events.append(("load", ahead, tile % stages))')],
        mistake_zh="把分块 t + stages - 1 预取到槽位 t % stages：即将计算的分块被覆盖",
    ),
    Mutant(
        "pipeline_schedule",
        "two_barriers",
        "adds a second barrier after the compute, as in the single-buffer kernel: correct, one barrier too many",
        [
            (
                'events.append(("compute", tile, tile % stages))',
                'events.append(("compute", tile, tile % stages))\n        events.append(("sync",))',
            )
        ],
        mistake_zh="像单缓冲内核那样在计算之后再加一个屏障：结果正确，多了一个屏障",
    ),
    # pipeline_time
    Mutant(
        "pipeline_time",
        "serial_time",
        "returns the time of the synchronous kernel, n (L + C)",
        [
            (
                "return load_cycles + max(num_tiles * compute_cycles, q * load_cycles + (r + 1) * compute_cycles)",
                "return num_tiles * (load_cycles + compute_cycles)",
            )
        ],
        mistake_zh="返回同步内核的时间 n (L + C)",
    ),
    Mutant(
        "pipeline_time",
        "stages_in_flight",
        "counts stages tiles in flight instead of stages - 1 (one slot is always being computed on)",
        [("in_flight = stages - 1", "in_flight = stages")],
        mistake_zh="在途分块数算成 stages 而不是 stages - 1（总有一个槽位正在被计算）",
    ),
    Mutant(
        "pipeline_time",
        "no_fill_latency",
        "forgets the first load's latency: the pipeline starts full",
        [
            (
                "return load_cycles + max(num_tiles * compute_cycles, q * load_cycles + (r + 1) * compute_cycles)",
                "return max(num_tiles * compute_cycles, q * load_cycles + (r + 1) * compute_cycles)",
            )
        ],
        mistake_zh="忘了第一次加载的延迟：好像流水线一开始就是满的",
    ),
    Mutant(
        "pipeline_time",
        "compute_bound_only",
        "assumes the loads are always hidden: L + n C even when L > (stages - 1) C",
        [
            (
                "return load_cycles + max(num_tiles * compute_cycles, q * load_cycles + (r + 1) * compute_cycles)",
                "return load_cycles + num_tiles * compute_cycles",
            )
        ],
        mistake_zh="假定加载总能被隐藏：即使 L > (stages - 1) C 也用 L + n C",
    ),
    Mutant(
        "pipeline_time",
        "float_division",
        "uses a float steady state n * max(C, L / (stages - 1)): right order of magnitude, wrong fill and rounding",
        [
            (
                "return load_cycles + max(num_tiles * compute_cycles, q * load_cycles + (r + 1) * compute_cycles)",
                "return load_cycles + num_tiles * max(compute_cycles, load_cycles / in_flight)",
            )
        ],
        mistake_zh="稳态用浮点的 n * max(C, L / (stages - 1))：数量级对，填充和取整错了",
    ),
    # double_buffer_sim
    Mutant(
        "double_buffer_sim",
        "single_buffer",
        "keeps using buffer 0 with one barrier per step: the prefetch overwrites the tile other threads still read",
        [("nxt = (t + 1) % 2", "nxt = 0"), ("cur = t % 2", "cur = 0")],
        mistake_zh="一直用缓冲区 0，每步一个屏障：预取覆盖了其他线程还在读的分块",
    ),
    Mutant(
        "double_buffer_sim",
        "barrier_after_prefetch",
        "puts the barrier after the prefetch: step t writes the buffer that slower threads read in step t - 1",
        [
            (
                "        cuda.syncthreads()  # tile t is in buffer t % 2 for everyone; everyone is done with "
                "buffer (t + 1) % 2\n",
                "",
            ),
            ("        cur = t % 2\n", "        cuda.syncthreads()\n        cur = t % 2\n"),
        ],
        mistake_zh="把屏障放在预取之后：第 t 步写入较慢的线程在第 t - 1 步读的缓冲区",
    ),
    Mutant(
        "double_buffer_sim",
        "prefetch_into_current_buffer",
        "loads tile t + 1 into buffer t % 2, the one being read",
        [("nxt = (t + 1) % 2", "nxt = t % 2")],
        mistake_zh="把分块 t + 1 加载到正在读的缓冲区 t % 2",
    ),
    Mutant(
        "double_buffer_sim",
        "prefetch_without_k_bound",
        "prefetches tile t + 1 without the K bound: reads past the end of a row of A",
        [
            (
                "As[nxt, ty, tx] = A[row, ka] if (row < M and ka < K) else np.float32(0.0)",
                "As[nxt, ty, tx] = A[row, ka] if row < M else np.float32(0.0)",
            )
        ],
        mistake_zh="预取分块 t + 1 时没有 K 边界：读到 A 一行的末尾之外",
    ),
    Mutant(
        "double_buffer_sim",
        "no_barrier",
        "drops the barrier: nothing orders the loads of one thread and the reads of another",
        [
            (
                "        cuda.syncthreads()  # tile t is in buffer t % 2 for everyone; everyone is done with "
                "buffer (t + 1) % 2\n",
                "",
            )
        ],
        mistake_zh="去掉屏障：一个线程的加载与另一个线程的读取之间没有任何顺序保证",
    ),
    # async_gemm_cuda (C++; each still compiles)
    Mutant(
        "async_gemm_cuda",
        "wait_one_group_too_few",
        "__pipeline_wait_prior(STAGES - 1): tile t's copies may still be in flight when it is computed",
        [("__pipeline_wait_prior(STAGES - 2);  // my copies", "__pipeline_wait_prior(STAGES - 1);  // my copies")],
        mistake_zh="__pipeline_wait_prior(STAGES - 1)：计算分块 t 时它的拷贝可能还在传输中",
    ),
    Mutant(
        "async_gemm_cuda",
        "no_barrier",
        "no __syncthreads() after the wait: a thread reads other threads' chunks before they have landed",
        [
            (
                "__syncthreads();  // everyone's have, and everyone has finished reading tile t - 1's slot",
                "// (no barrier)",
            )
        ],
        mistake_zh="等待之后没有 __syncthreads()：线程在其他线程的数据块落地之前就读取它们",
    ),
    Mutant(
        "async_gemm_cuda",
        "reads_wrong_stage",
        "computes on slot (t + 1) % STAGES instead of t % STAGES",
        [("const int slot = t % STAGES;", "const int slot = (t + 1) % STAGES;")],
        mistake_zh="在槽位 (t + 1) % STAGES 而不是 t % STAGES 上计算",
    ),
    Mutant(
        "async_gemm_cuda",
        "prefetch_into_current_slot",
        "prefetches tile t + STAGES - 1 into slot t % STAGES, the one being computed on",
        [
            (
                "load_tile_async(A, B, As, Bs, ahead % STAGES, ahead,",
                "load_tile_async(A, B, As, Bs, t % STAGES, ahead,",
            )
        ],
        mistake_zh="把分块 t + STAGES - 1 预取到正在计算的槽位 t % STAGES",
    ),
    Mutant(
        "async_gemm_cuda",
        "no_zero_fill",
        "copies 16 bytes from the dummy source instead of zero-filling the chunks outside the matrices",
        [
            (
                "__pipeline_memcpy_async(&As[slot][r][c], src, 16, inside ? 0 : 16);",
                "__pipeline_memcpy_async(&As[slot][r][c], src, 16, 0);",
            ),
            (
                "__pipeline_memcpy_async(&Bs[slot][r][c], src, 16, inside ? 0 : 16);",
                "__pipeline_memcpy_async(&Bs[slot][r][c], src, 16, 0);",
            ),
        ],
        mistake_zh="矩阵之外的数据块从占位源拷贝 16 字节，而不是填零",
    ),
    Mutant(
        "async_gemm_cuda",
        "zfill_as_src_size",
        "passes PTX's src_size (16 inside, 0 outside) as the zfill argument, which counts the bytes to zero: the chunks "
        "inside the matrices become zeros and those outside are copied from the dummy source",
        [
            (
                "__pipeline_memcpy_async(&As[slot][r][c], src, 16, inside ? 0 : 16);",
                "__pipeline_memcpy_async(&As[slot][r][c], src, 16, inside ? 16 : 0);",
            ),
            (
                "__pipeline_memcpy_async(&Bs[slot][r][c], src, 16, inside ? 0 : 16);",
                "__pipeline_memcpy_async(&Bs[slot][r][c], src, 16, inside ? 16 : 0);",
            ),
        ],
        mistake_zh="把 PTX 的 src_size（内部 16、外部 0）当作 zfill 参数传入，而它数的是要置零的字节：矩阵内的块变成零，矩阵外的块反而从占位源拷贝",
    ),
    Mutant(
        "async_gemm_cuda",
        "no_alignment_check",
        "no check that K and N are multiples of 4: a 16-byte chunk straddles the end of a row",
        [
            (
                "TORCH_CHECK(A.size(1) % 4 == 0 && B.size(1) % 4 == 0,",
                "TORCH_CHECK(true,",
            )
        ],
        mistake_zh="不检查 K 和 N 是否是 4 的倍数：16 字节的数据块跨越了行尾",
    ),
]
