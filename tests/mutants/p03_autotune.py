"""Realistic wrong versions of the p03.autotune solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "prune_configs",
        "smem_without_stages",
        "counts one A tile and one B tile, forgetting the num_stages pipeline buffers",
        [("return config.num_stages * (meta", "return 1 * (meta")],
        mistake_zh="只算一个 A 分块和一个 B 分块，忘了 num_stages 份流水线缓冲",
    ),
    Mutant(
        "prune_configs",
        "fixed_element_size",
        "assumes 2-byte elements, so fp32 configs that do not fit are kept",
        [('element_size = named_args["a_ptr"].element_size()', "element_size = 2")],
        mistake_zh="假定每个元素 2 字节，放不下的 fp32 配置被保留了",
    ),
    Mutant(
        "prune_configs",
        "tile_larger_than_problem_rule_without_power_of_two",
        "compares BLOCK_M with M itself, dropping the 64-row tile that M = 40 needs",
        [
            (
                'max_block_m = max(16, triton.next_power_of_2(named_args["M"]))',
                'max_block_m = max(16, named_args["M"])',
            ),
            (
                'max_block_n = max(16, triton.next_power_of_2(named_args["N"]))',
                'max_block_n = max(16, named_args["N"])',
            ),
        ],
        mistake_zh="拿 BLOCK_M 与 M 本身比较，去掉了 M = 40 所需的 64 行分块",
    ),
    Mutant(
        "prune_configs",
        "may_return_nothing",
        "returns an empty list when nothing fits, which makes the autotuner raise",
        [
            (
                "return kept or [min(configs, key=lambda config: shared_memory_bytes(config, element_size))]",
                "return kept",
            )
        ],
        mistake_zh="什么都放不下时返回空列表，让自动调优器报错",
    ),
    Mutant(
        "measure",
        "no_warmup",
        "times from the first call, compile included",
        [("    for _ in range(warmup):\n        fn()\n", "")],
        mistake_zh="从第一次调用就开始计时，把编译也算进去了",
    ),
    Mutant(
        "measure",
        "mean_not_median",
        "reports the mean, which every hiccup drags up",
        [("return statistics.median(durations)", "return statistics.mean(durations)")],
        mistake_zh="报告平均值，每次抖动都会把它拉高",
    ),
    Mutant(
        "measure",
        "no_sync_after_call",
        "reads the clock right after the launch returns, before the kernel ran",
        [("        fn()\n        synchronize()\n", "        fn()\n")],
        mistake_zh="启动一返回就读时钟，此时内核还没运行",
    ),
    Mutant(
        "measure",
        "flush_timed",
        "starts the clock before the cache flush, so the flush is timed too",
        [
            (
                "        flush()\n        synchronize()\n        start = clock()\n",
                "        start = clock()\n        flush()\n",
            ),
        ],
        mistake_zh="在清缓存之前就开始计时，清缓存也被计入",
    ),
    Mutant(
        "split_k",
        "store_not_atomic",
        "stores each slice's partial tile, so the last slice to run overwrites the others",
        [("tl.atomic_add(c_ptrs, acc, mask=", "tl.store(c_ptrs, acc, mask=")],
        mistake_zh="每个切片存储自己的部分分块，最后运行的切片覆盖了其他切片",
    ),
    Mutant(
        "split_k",
        "floor_slices",
        "splits K into K // SPLIT_K columns per slice, dropping the tail when SPLIT_K does not divide K",
        [
            (
                "steps_per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)",
                "steps_per_split = tl.cdiv(K // SPLIT_K, BLOCK_K)",
            ),
            ("k_start = pid_k * steps_per_split * BLOCK_K", "k_start = pid_k * (K // SPLIT_K)"),
        ],
        mistake_zh="每个切片分 K // SPLIT_K 列，SPLIT_K 不整除 K 时丢了尾部",
    ),
    Mutant(
        "split_k",
        "no_reset_to_zero",
        "autotunes the accumulating kernel without reset_to_zero",
        [('key=["M", "N", "K"], reset_to_zero=["c_ptr"], do_bench=do_bench', 'key=["M", "N", "K"], do_bench=do_bench')],
        mistake_zh="对累加型内核做自动调优却没有 reset_to_zero",
    ),
    Mutant(
        "split_k",
        "no_tuning_key",
        "autotunes with key=[]: the config tuned for the first shape is reused for every later shape",
        [('key=["M", "N", "K"], reset_to_zero=["c_ptr"]', 'key=[], reset_to_zero=["c_ptr"]')],
        mistake_zh="用 key=[] 自动调优：为第一个形状调出的配置被后面所有形状复用",
    ),
    Mutant(
        "split_k",
        "no_k_mask",
        "loads A without the K mask, so the last slice reads past the end of each row of A",
        [("a = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_K)[None, :] < k_left, other=0.0)", "a = tl.load(a_ptrs)")],
        mistake_zh="加载 A 时没有 K 掩码，最后一个切片读到 A 每一行末尾之外",
    ),
    Mutant(
        "split_k",
        "rows_not_wrapped",
        "indexes A's rows with offs_m unwrapped (no % M, no mask): the last row tile reads past the end of A",
        [("(offs_m % M)[:, None] * stride_am", "offs_m[:, None] * stride_am")],
        mistake_zh="A 的行用未取模的 offs_m 索引（没有 % M，也没有掩码）：最后一个行分块读到 A 的末尾之外",
    ),
]
