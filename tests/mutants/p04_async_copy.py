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
    ),
    Mutant(
        "pipeline_schedule",
        "wait_all_every_step",
        "waits for all groups (wait 0) every step: correct, but the pipeline drains and nothing overlaps",
        [('events.append(("wait", stages - 2))', 'events.append(("wait", 0))')],
    ),
    Mutant(
        "pipeline_schedule",
        "prefetch_into_current_slot",
        "prefetches tile t + stages - 1 into slot t % stages: the tile about to be computed is overwritten",
        [('events.append(("load", ahead, ahead % stages))', 'events.append(("load", ahead, tile % stages))')],
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
    ),
    Mutant(
        "pipeline_time",
        "stages_in_flight",
        "counts stages tiles in flight instead of stages - 1 (one slot is always being computed on)",
        [("in_flight = stages - 1", "in_flight = stages")],
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
    ),
    # double_buffer_sim
    Mutant(
        "double_buffer_sim",
        "single_buffer",
        "keeps using buffer 0 with one barrier per step: the prefetch overwrites the tile other threads still read",
        [("nxt = (t + 1) % 2", "nxt = 0"), ("cur = t % 2", "cur = 0")],
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
    ),
    Mutant(
        "double_buffer_sim",
        "prefetch_into_current_buffer",
        "loads tile t + 1 into buffer t % 2, the one being read",
        [("nxt = (t + 1) % 2", "nxt = t % 2")],
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
    ),
    Mutant(
        "double_buffer_sim",
        "divergent_barrier",
        "synchronises only the threads whose (row, col) is inside C: in an edge block the per-tile barrier is reached "
        "by some threads only",
        [
            (
                "        cuda.syncthreads()  # tile t is in buffer t % 2",
                "        if row < M and col < N:\n            cuda.syncthreads()  # tile t is in buffer t % 2",
            )
        ],
        mistake_zh="只有 (row, col) 落在 C 内的线程执行每个 tile 的 cuda.syncthreads()：边缘 block 里只有部分线程到达这个屏障",
    ),
    # async_gemm_cuda (C++; each still compiles)
    Mutant(
        "async_gemm_cuda",
        "wait_one_group_too_few",
        "__pipeline_wait_prior(STAGES - 1): tile t's copies may still be in flight when it is computed",
        [("__pipeline_wait_prior(STAGES - 2);  // my copies", "__pipeline_wait_prior(STAGES - 1);  // my copies")],
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
    ),
    Mutant(
        "async_gemm_cuda",
        "reads_wrong_stage",
        "computes on slot (t + 1) % STAGES instead of t % STAGES",
        [("const int slot = t % STAGES;", "const int slot = (t + 1) % STAGES;")],
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
    ),
]
