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
        mistake_zh="树的各步之间没有 cuda.syncthreads()：线程在搭档写入之前就读了它的值",
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
        mistake_zh="第一次加载有保护，第二次没有：最后一个线程块读到 n 之外",
    ),
    Mutant(
        "block_sum_sim",
        "single_pass",
        "one pass only: returns the first block's partial sum",
        [("if blocks == 1:\n            return partial", "return partial[:1]")],
        mistake_zh="只做一遍：返回第一个线程块的部分和",
    ),
    # atomic_sum_sim
    Mutant(
        "atomic_sum_sim",
        "plain_add",
        "out[0] += value without an atomic: a read-modify-write that other threads interleave with on a GPU",
        [("cuda.atomic.add(out, 0, value)", "out[0] += value")],
        mistake_zh="不用原子操作做 out[0] += value：在 GPU 上是一次会被其他线程穿插的读-改-写",
    ),
    Mutant(
        "atomic_sum_sim",
        "stride_is_one_block",
        "steps by blockDim.x instead of the whole grid: elements are counted by several blocks",
        [("i += cuda.gridsize(1)", "i += cuda.blockDim.x")],
        mistake_zh="按 blockDim.x 而不是整个网格步进：元素被多个线程块重复计入",
    ),
    Mutant(
        "atomic_sum_sim",
        "keeps_last_element",
        "value = x[i] instead of value += x[i]: each thread contributes its last element only",
        [("value += x[i]", "value = x[i]")],
        mistake_zh="value = x[i] 而不是 value += x[i]：每个线程只贡献最后一个元素",
    ),
    # reduction_cuda (C++; each still compiles)
    Mutant(
        "reduction_cuda",
        "no_barrier_after_store",
        "no __syncthreads() between the store to shared memory and the tree: a race on shared memory",
        [("shared[threadIdx.x] = v;\n    __syncthreads();", "shared[threadIdx.x] = v;")],
        mistake_zh="存入共享内存与树形归约之间没有 __syncthreads()：共享内存上的竞争",
    ),
    Mutant(
        "reduction_cuda",
        "tree_stops_at_64",
        "the tree runs while stride > 32: shared[32..63] never reaches warp 0",
        [("stride >= 32; stride /= 2", "stride > 32; stride /= 2")],
        mistake_zh="树的循环条件是 stride > 32：shared[32..63] 从未到达 warp 0",
    ),
    Mutant(
        "reduction_cuda",
        "shuffle_from_8",
        "the shuffles start at offset 8: lanes 16-31 are never added",
        [("int offset = 16; offset > 0", "int offset = 8; offset > 0")],
        mistake_zh="shuffle 从偏移 8 开始：第 16-31 号 lane 从未被加上",
    ),
    Mutant(
        "reduction_cuda",
        "reads_x_at_n",
        "the grid-stride loop runs while i <= n: one thread adds x[n], past the end",
        [("i < n; i += stride", "i <= n; i += stride")],
        mistake_zh="网格步长循环的条件是 i <= n：有个线程加了 x[n]，越过了末尾",
    ),
    Mutant(
        "reduction_cuda",
        "single_pass",
        "no second pass: returns the first block's partial sum",
        [("block_sums(partial, out);\n    return out.reshape({});", "return partial[0];")],
        mistake_zh="没有第二遍：返回第一个线程块的部分和",
    ),
    Mutant(
        "reduction_cuda",
        "plain_add",
        "*out += total instead of atomicAdd: blocks overwrite each other's additions",
        [("atomicAdd(out, total);", "*out += total;")],
        mistake_zh="*out += total 而不是 atomicAdd：线程块互相覆盖对方的累加",
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
        mistake_zh="block_sums 启动 ceil(n / THREADS) 个线程块而不是每个部分和一个，写到部分和数组之外",
    ),
]
