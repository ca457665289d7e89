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
        mistake_zh="把页取成 t % block_size，把槽位取成 t // block_size",
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
        mistake_zh="填充的 key 通道也去加载块表项，于是跟着 -1 或超出池范围的 id 去读",
    ),
    Mutant(
        "paged_decode_partials",
        "no_table_row_offset",
        "forgets batch * stride_tb: every sequence reads sequence 0's table",
        [("table = block_tables_ptr + batch * stride_tb", "table = block_tables_ptr")],
        mistake_zh="忘了 batch * stride_tb：每个序列都读序列 0 的块表",
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
        mistake_zh="把块池当作一整块连续的缓存来寻址：按顺序读块 0、1、……的第 t 行",
    ),
    Mutant(
        "paged_decode_partials",
        "head_stride_ignored",
        "forgets the KV head's offset inside a slot: every query group reads KV head 0",
        [
            ("k_head = k_ptr + kv_head * stride_kh", "k_head = k_ptr"),
            ("v_head = v_ptr + kv_head * stride_vh", "v_head = v_ptr"),
        ],
        mistake_zh="忘了 KV 头在槽位内的偏移：每个 query 组都读 KV 头 0",
    ),
    Mutant(
        "paged_decode_partials",
        "validates_every_entry",
        "checks every table entry, padding included, so a table padded with -1 is refused",
        [("entries = block_tables[used]", "entries = block_tables.flatten()")],
        mistake_zh="检查块表的每一项，包括填充项，于是用 -1 填充的块表被拒绝",
    ),
    Mutant(
        "paged_decode_partials",
        "no_entry_validation",
        "checks the lengths but not the table entries",
        [("if bool(outside.any()):", "if False:")],
        mistake_zh="检查了长度，却不检查块表项",
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
        mistake_zh="包装函数从不校验块表（而且调用部分结果内核时传了 validate=False）",
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
        mistake_zh="以 float32 而不是 q 的 dtype 返回合并后的输出",
    ),
    Mutant(
        "paged_decode_partials",
        "v_uses_k_strides",
        "addresses the value pool with the key pool's strides (right whenever the two pools share a layout)",
        [
            ("v_head = v_ptr + kv_head * stride_vh", "v_head = v_ptr + kv_head * stride_kh"),
            (
                "v_rows = v_head + page * stride_vblock + slot * stride_vslot",
                "v_rows = v_head + page * stride_kblock + slot * stride_kslot",
            ),
        ],
        mistake_zh="用 key 池的 stride 寻址 value 池（两个池布局相同时才碰巧正确）",
    ),
    Mutant(
        "paged_decode_partials",
        "strided_seq_lens_read_as_contiguous",
        "hands a strided seq_lens to a kernel that reads seq_lens_ptr + b (another element's length, or a stray read)",
        [("seq_lens = seq_lens.contiguous()", "seq_lens = seq_lens")],
        mistake_zh="把带 stride 的 seq_lens 直接交给按 seq_lens_ptr + b 读取的内核（读到别的元素或越界）",
    ),
    Mutant(
        "paged_decode_partials",
        "page_offset_int32",
        "keeps the page id in int32, so page * stride_kblock wraps once the pool passes 2**31 elements",
        [
            (
                "page = tl.load(table + keys // PAGE_SIZE, mask=key_ok, other=0).to(tl.int64)",
                "page = tl.load(table + keys // PAGE_SIZE, mask=key_ok, other=0)",
            )
        ],
        mistake_zh="页号保持 int32，池超过 2**31 个元素后 page * stride_kblock 溢出回绕",
        requires_compiled=True,
    ),
]
