"""Realistic wrong versions of the p04.reduction solutions; every one must be rejected by a check.

The mutants of `reduction_cuda` are C++ that still compiles (only its meaning is broken), so that on a GPU they are
rejected by a check and not by nvcc; on a CPU their checks read *needs a GPU*."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # block_sum_sim
    Mutant(
        "block_sum_sim",
        "no_barrier_in_tree",
        "no cuda.syncthreads() between the steps of the tree: threads read partners' values before they are written",
        [
            (
                "            shared[t] += shared[t + stride]\n        cuda.syncthreads()\n",
                "            shared[t] += shared[t + stride]\n",
            )
        ],
        mistake_zh="树形归约的各步之间没有 cuda.syncthreads()：线程在伙伴写入之前就读取了它的值",
    ),
    Mutant(
        "block_sum_sim",
        "divergent_barrier",
        "puts the tree's cuda.syncthreads() inside `if t < stride:`: a barrier only some threads reach (a GPU hangs "
        "or mixes barriers; the simulator waited only for the threads still running)",
        [
            (
                "            shared[t] += shared[t + stride]\n        cuda.syncthreads()\n",
                "            shared[t] += shared[t + stride]\n            cuda.syncthreads()\n",
            )
        ],
        mistake_zh="把归约树里的 cuda.syncthreads() 放进了 `if t < stride:`：只有部分线程到达的屏障（GPU 上会挂起或错配屏障）",
    ),
    Mutant(
        "block_sum_sim",
        "no_barrier_after_store",
        "no cuda.syncthreads() between the store to shared memory and the tree: a thread reads its partner's element "
        "before the partner wrote it (a race)",
        [("    shared[t] = value\n    cuda.syncthreads()\n", "    shared[t] = value\n")],
        mistake_zh="写入共享内存之后、归约树之前没有 cuda.syncthreads()：线程在伙伴写入之前就读了它的元素（数据竞争）",
    ),
    Mutant(
        "block_sum_sim",
        "interleaved_strided_index",
        "reduces with Harris's interleaved strided index (thread t adds shared[2 * stride * t + stride] into "
        "shared[2 * stride * t], stride = 1, 2, ...): the right sum, with 2-way and worse bank conflicts",
        [
            (
                "    stride = THREADS // 2\n"
                "    while stride > 0:\n"
                "        if t < stride:\n"
                "            shared[t] += shared[t + stride]\n"
                "        cuda.syncthreads()\n"
                "        stride //= 2\n",
                "    stride = 1\n"
                "    while stride < THREADS:\n"
                "        index = 2 * stride * t\n"
                "        if index < THREADS:\n"
                "            shared[index] += shared[index + stride]\n"
                "        cuda.syncthreads()\n"
                "        stride *= 2\n",
            )
        ],
        mistake_zh="用 Harris 的交错寻址（线程 t 把 shared[2*stride*t + stride] 加到 shared[2*stride*t]，stride = 1, 2, ...）"
        "做归约：和是对的，但有 2 路及更多的 bank 冲突",
    ),
    Mutant(
        "block_sum_sim",
        "tree_stops_one_step_early",
        "the loop runs while stride > 1: the last pair is never added",
        [("while stride > 0:", "while stride > 1:")],
        mistake_zh="循环条件是 stride > 1：最后一对从未相加",
    ),
    Mutant(
        "block_sum_sim",
        "second_load_unguarded",
        "guards the first load but not the second: the last block reads past n",
        [("if i + THREADS < n:\n        value += x[i + THREADS]", "if i < n:\n        value += x[i + THREADS]")],
        mistake_zh="第一次加载有边界判断，第二次没有：最后一个 block 读越过了 n",
    ),
    Mutant(
        "block_sum_sim",
        "single_pass",
        "one pass only: returns the first block's partial sum",
        [("if blocks == 1:\n            return partial", "return partial[:1]")],
        mistake_zh="只做一轮：返回的是第一个 block 的部分和",
    ),
    # atomic_sum_sim
    Mutant(
        "atomic_sum_sim",
        "plain_add",
        "out[0] += value without an atomic: a read-modify-write that other threads interleave with on a GPU",
        [("cuda.atomic.add(out, 0, value)", "out[0] += value")],
        mistake_zh="不用原子操作，直接 out[0] += value：在 GPU 上这是一次读-改-写，会与其他线程交错",
    ),
    Mutant(
        "atomic_sum_sim",
        "stride_is_one_block",
        "steps by blockDim.x instead of the whole grid: elements are counted by several blocks",
        [("i += cuda.gridsize(1)", "i += cuda.blockDim.x")],
        mistake_zh="按 blockDim.x 而不是整个 grid 前进：元素被多个 block 重复计数",
    ),
    Mutant(
        "atomic_sum_sim",
        "keeps_last_element",
        "value = x[i] instead of value += x[i]: each thread contributes its last element only",
        [("value += x[i]", "value = x[i]")],
        mistake_zh="写成 value = x[i] 而不是 value += x[i]：每个线程只贡献了它的最后一个元素",
    ),
    # reduction_cuda (C++; each still compiles)
    Mutant(
        "reduction_cuda",
        "no_barrier_after_store",
        "no __syncthreads() between the store to shared memory and the tree: a race on shared memory",
        [("shared[threadIdx.x] = v;\n    __syncthreads();", "shared[threadIdx.x] = v;")],
        mistake_zh="写入共享内存与树形归约之间没有 __syncthreads()：共享内存上出现数据竞争",
    ),
    Mutant(
        "reduction_cuda",
        "tree_stops_at_64",
        "the tree runs while stride > 32: shared[32..63] never reaches warp 0",
        [("stride >= 32; stride /= 2", "stride > 32; stride /= 2")],
        mistake_zh="树形归约的循环条件是 stride > 32：shared[32..63] 从未归约进 warp 0",
    ),
    Mutant(
        "reduction_cuda",
        "shuffle_from_8",
        "the shuffles start at offset 8: lanes 16-31 are never added",
        [("int offset = 16; offset > 0", "int offset = 8; offset > 0")],
        mistake_zh="shuffle 从偏移 8 开始：lane 16-31 从未被加进来",
    ),
    Mutant(
        "reduction_cuda",
        "reads_x_at_n",
        "the grid-stride loop runs while i <= n: one thread adds x[n], past the end",
        [("i < n; i += stride", "i <= n; i += stride")],
        mistake_zh="grid-stride 循环条件是 i <= n：有一个线程加了越界的 x[n]",
    ),
    Mutant(
        "reduction_cuda",
        "single_pass",
        "no second pass: returns the first block's partial sum",
        [("block_sums(partial, out);\n    return out.reshape({});", "return partial[0];")],
        mistake_zh="没有第二轮：返回的是第一个 block 的部分和",
    ),
    Mutant(
        "reduction_cuda",
        "plain_add",
        "*out += total instead of atomicAdd: blocks overwrite each other's additions",
        [("atomicAdd(out, total);", "*out += total;")],
        mistake_zh="用 *out += total 而不是 atomicAdd：各 block 相互覆盖彼此的加法结果",
    ),
    Mutant(
        "reduction_cuda",
        "blocks_from_n",
        "block_sums launches ceil(n / THREADS) blocks instead of one per partial, writing past the partials",
        [
            (
                "const unsigned int blocks = static_cast<unsigned int>(partial.numel());",
                "const unsigned int blocks = static_cast<unsigned int>((x.numel() + THREADS - 1) / THREADS);",
            )
        ],
        mistake_zh="block_sums 启动 ceil(n / THREADS) 个 block，而不是每个部分和一个 block，写越过了部分和数组",
    ),
]
