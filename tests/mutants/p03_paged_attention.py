"""Realistic wrong versions of the p03.paged_attention solutions; every one must be rejected by a check (on the CPU
through Triton's interpreter)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "paged_decode_partials",
        "page_and_slot_swapped",
        "takes the page as t % block_size and the slot as t // block_size",
        [
            (
                "page = tl.load(table + keys // PAGE_SIZE, mask=key_ok, other=0).to(tl.int64)",
                "page = tl.load(table + keys % PAGE_SIZE, mask=key_ok, other=0).to(tl.int64)",
            ),
            ("slot = (keys % PAGE_SIZE).to(tl.int64)", "slot = (keys // PAGE_SIZE).to(tl.int64)"),
        ],
        mistake_zh="页号取 t % block_size，槽位取 t // block_size",
    ),
    Mutant(
        "paged_decode_partials",
        "table_read_unmasked",
        "loads the table entries of the padded key lanes too, following -1 or ids past the pool",
        [
            (
                "page = tl.load(table + keys // PAGE_SIZE, mask=key_ok, other=0).to(tl.int64)",
                "page = tl.load(table + keys // PAGE_SIZE).to(tl.int64)",
            )
        ],
        mistake_zh="填充 key 通道的表项也被加载，顺着 -1 或越过池的 id 去读",
    ),
    Mutant(
        "paged_decode_partials",
        "no_table_row_offset",
        "forgets batch * stride_tb: every sequence reads sequence 0's table",
        [("table = block_tables_ptr + batch * stride_tb", "table = block_tables_ptr")],
        mistake_zh="忘了 batch * stride_tb：每个序列读的都是序列 0 的表",
    ),
    Mutant(
        "paged_decode_partials",
        "no_gather",
        "addresses the pool as if it were one contiguous cache: row t of block 0, 1, ... in order",
        [
            (
                "page = tl.load(table + keys // PAGE_SIZE, mask=key_ok, other=0).to(tl.int64)",
                "page = (keys // PAGE_SIZE).to(tl.int64)",
            )
        ],
        mistake_zh="把池当作一个连续缓存寻址：依次读块 0、1、……的第 t 行",
    ),
    Mutant(
        "paged_decode_partials",
        "head_stride_ignored",
        "forgets the KV head's offset inside a slot: every query group reads KV head 0",
        [
            ("k_head = k_ptr + kv_head * stride_kh", "k_head = k_ptr"),
            ("v_head = v_ptr + kv_head * stride_vh", "v_head = v_ptr"),
        ],
        mistake_zh="忘了槽位内 KV 头的偏移：每个 query 组都读 KV 头 0",
    ),
    Mutant(
        "paged_decode_partials",
        "validates_every_entry",
        "checks every table entry, padding included, so a table padded with -1 is refused",
        [("entries = block_tables[used]", "entries = block_tables.flatten()")],
        mistake_zh="检查每个表项（包括填充的），用 -1 填充的表被拒绝",
    ),
    Mutant(
        "paged_decode_partials",
        "no_entry_validation",
        "checks the lengths but not the table entries",
        [("if bool(outside.any()):", "if False:")],
        mistake_zh="检查了长度，却没检查表项",
    ),
    Mutant(
        "paged_decode_attention",
        "wrapper_skips_validation",
        "the wrapper never validates the table (and the partials are called with validate=False)",
        [
            (
                "check_paged_inputs(q, key_cache, value_cache, block_tables, seq_lens, validate)\n    if num_splits",
                "check_paged_inputs(q, key_cache, value_cache, block_tables, seq_lens, False)\n    if num_splits",
            )
        ],
        mistake_zh="包装函数从不检查表（部分结果又以 validate=False 调用）",
    ),
    Mutant(
        "paged_decode_attention",
        "no_num_splits_refusal",
        "accepts num_splits = 0",
        [("if num_splits is not None and num_splits < 1:", "if num_splits is not None and num_splits < 0:")],
        mistake_zh="接受 num_splits = 0",
    ),
    Mutant(
        "paged_decode_attention",
        "output_in_float32",
        "returns the combined output in float32 instead of q's dtype",
        [
            (
                "return combine_splits(m, l, acc, out_dtype=q.dtype)",
                "return combine_splits(m, l, acc, out_dtype=torch.float32)",
            )
        ],
        mistake_zh="合并后的输出以 float32 而不是 q 的数据类型返回",
    ),
]
