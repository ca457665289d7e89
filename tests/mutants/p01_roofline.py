"""Realistic wrong versions of the p01.roofline solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "matmul_cost",
        "multiply_adds",
        "counts multiply-adds (M*N*K) instead of FLOPs (2*M*N*K)",
        [("flops = 2 * M * N * K", "flops = M * N * K")],
        mistake_zh="按乘加次数（M*N*K）而不是 FLOPs（2*M*N*K）计算",
    ),
    Mutant(
        "matmul_cost",
        "output_not_written",
        "counts the reads of A and B but not the write of C",
        [("traffic = (M * K + K * N + M * N) * element", "traffic = (M * K + K * N) * element")],
        mistake_zh="算了 A 和 B 的读取，没算 C 的写回",
    ),
    Mutant(
        "matmul_cost",
        "elements_not_bytes",
        "returns elements instead of bytes",
        [("element = torch.empty((), dtype=dtype).element_size()", "element = 1")],
        mistake_zh="返回元素个数而不是字节数",
    ),
    Mutant(
        "attention_cost",
        "flops_with_kv_heads",
        "counts the attention matmuls with the KV heads",
        [("flops = 4 * batch * q_heads * q_len", "flops = 4 * batch * kv_heads * q_len")],
        mistake_zh="注意力矩阵乘按 KV 头数计算",
    ),
    Mutant(
        "attention_cost",
        "no_gqa_saving",
        "stores K and V with every query head",
        [("keys_and_values = 2 * batch * kv_heads * kv_len", "keys_and_values = 2 * batch * q_heads * kv_len")],
        mistake_zh="每个 query 头都存一份 K 和 V",
    ),
    Mutant(
        "attention_cost",
        "output_forgotten",
        "reads Q but forgets to write O",
        [("query_and_output = 2 * batch * q_heads", "query_and_output = batch * q_heads")],
        mistake_zh="读了 Q，却忘了写 O",
    ),
    Mutant(
        "attention_cost",
        "causal_half",
        "counts only the causal half of the score matrix",
        [("flops = 4 * batch", "flops = 2 * batch")],
        mistake_zh="只算分数矩阵的因果那一半",
    ),
    Mutant(
        "roofline_bound",
        "times_added",
        "adds compute and memory time (no overlap) instead of taking the larger",
        [
            (
                'if compute_time >= memory_time:\n        return compute_time, "compute"',
                'if compute_time >= memory_time:\n        return compute_time + memory_time, "compute"',
            )
        ],
        mistake_zh="把计算时间和访存时间相加（没有重叠），而不是取较大者",
    ),
    Mutant(
        "roofline_bound",
        "tie_is_memory",
        "calls the ridge point itself memory-bound",
        [("if compute_time >= memory_time:", "if compute_time > memory_time:")],
        mistake_zh="把恰好位于脊点的情况判为访存受限",
    ),
    Mutant(
        "roofline_bound",
        "sides_swapped",
        "labels the faster roof instead of the slower",
        [
            ('return compute_time, "compute"', 'return compute_time, "memory"'),
            ('return memory_time, "memory"', 'return memory_time, "compute"'),
        ],
        mistake_zh="标成了较快的那条屋顶，而不是较慢的",
    ),
]
