"""Realistic wrong versions of the p02.attention_mha_gqa solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # repeat_kv
    Mutant(
        "repeat_kv",
        "tiles_heads",
        "puts the group axis before the head axis: head h uses KV head h % H_kv (x.repeat order)",
        [
            (
                "x[:, :, None, :, :].expand(B, H_kv, n_rep, S, D)",
                "x[:, None, :, :, :].expand(B, n_rep, H_kv, S, D)",
            )
        ],
        mistake_zh="把组轴放在头轴之前：头 h 用的是 KV 头 h % H_kv（x.repeat 的顺序）",
    ),
    Mutant(
        "repeat_kv",
        "repeats_positions",
        "inserts the copies after the sequence axis, then reshapes: positions get mixed into heads",
        [
            (
                "x[:, :, None, :, :].expand(B, H_kv, n_rep, S, D)",
                "x[:, :, :, None, :].expand(B, H_kv, S, n_rep, D)",
            )
        ],
        mistake_zh="在序列轴之后插入副本再 reshape：位置被混进了头里",
    ),
    # attention
    Mutant(
        "attention",
        "top_left_causal",
        "uses SDPA's top-left causal triangle (tril without the S_k - S_q offset)",
        [("allowed.tril(diagonal=S_k - S_q)", "allowed.tril()")],
        mistake_zh="用 SDPA 左上对齐的因果三角（tril 没有 S_k - S_q 的偏移）",
    ),
    Mutant(
        "attention",
        "causal_off_by_one",
        "a strict causal mask: a token cannot see itself",
        [("allowed.tril(diagonal=S_k - S_q)", "allowed.tril(diagonal=S_k - S_q - 1)")],
        mistake_zh="严格的因果掩码：token 看不到自己",
    ),
    Mutant(
        "attention",
        "scale_one_over_d",
        "scales the scores by 1/D instead of 1/sqrt(D)",
        [("/ math.sqrt(D)", "/ D")],
        mistake_zh="分数乘以 1/D 而不是 1/√D",
    ),
    Mutant(
        "attention",
        "tiled_grouping",
        "repeats the KV heads by tiling (torch .repeat): query head h uses KV head h % H_kv",
        [
            ("k = repeat_kv(k, H_q // H_kv)", "k = k.repeat(1, H_q // H_kv, 1, 1)"),
            ("v = repeat_kv(v, H_q // H_kv)", "v = v.repeat(1, H_q // H_kv, 1, 1)"),
        ],
        mistake_zh="用平铺（torch .repeat）重复 KV 头：query 头 h 用的是 KV 头 h % H_kv",
    ),
    Mutant(
        "attention",
        "padding_on_queries",
        "broadcasts the padding mask over the query axis instead of the key axis",
        [("key_padding_mask[:, None, None, :]", "key_padding_mask[:, None, :, None]")],
        mistake_zh="padding 掩码沿 query 轴而不是 key 轴广播",
    ),
    Mutant(
        "attention",
        "plain_softmax_nan_rows",
        "masked_fill(-inf) followed by torch.softmax: rows with no visible key become NaN",
        [
            (
                "probs = weights / denominator",
                "probs = torch.softmax(scores, dim=-1)",
            )
        ],
        mistake_zh="masked_fill(-inf) 后直接 torch.softmax：没有可见 key 的行变成 NaN",
    ),
    Mutant(
        "attention",
        "finite_mask_value",
        "masks with finfo.min instead of -inf: an all-masked row averages the padding uniformly",
        [
            (
                'scores.masked_fill(~allowed, float("-inf"))',
                "scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)",
            )
        ],
        mistake_zh="用 finfo.min 而不是 -inf 屏蔽：全被屏蔽的行对 padding 做了均匀平均",
    ),
    Mutant(
        "attention",
        "softmax_in_input_dtype",
        "computes scores and softmax in fp16/bf16 instead of float32",
        [("compute_dtype = torch.promote_types(q.dtype, torch.float32)", "compute_dtype = q.dtype")],
        mistake_zh="分数和 softmax 在 fp16/bf16 而不是 float32 下计算",
    ),
    # KVCache
    Mutant(
        "KVCache",
        "returns_only_new",
        "stores the new chunk but returns only the new keys and values",
        [
            (
                "return self.keys[:, :, : self.length], self.values[:, :, : self.length]",
                "return k, v",
            )
        ],
        mistake_zh="存下了新块，却只返回新的 key 和 value",
    ),
    Mutant(
        "KVCache",
        "counts_calls",
        "length counts updates instead of positions",
        [("self.length = int(new_lengths.max())", "self.length += 1")],
        mistake_zh="length 统计的是更新次数，而不是位置数",
    ),
    Mutant(
        "KVCache",
        "overwrites",
        "writes every chunk at position 0 instead of after the cached positions",
        [("start, count = int(self.lengths[row]), int(num_new[row])", "start, count = 0, int(num_new[row])")],
        mistake_zh="每个块都写在位置 0，而不是已缓存位置之后",
    ),
    Mutant(
        "KVCache",
        "writes_at_common_length",
        "writes every row at the batch's longest length instead of its own lengths[b]",
        [("start, count = int(self.lengths[row]), int(num_new[row])", "start, count = self.length, int(num_new[row])")],
        mistake_zh="每一行都写在批内最长的长度处，而不是各自的 lengths[b]",
    ),
    Mutant(
        "KVCache",
        "counts_padding",
        "advances every row by S_new, the padding columns included, instead of num_new[b]",
        [("new_lengths = self.lengths + num_new", "new_lengths = self.lengths + S_new")],
        mistake_zh="每一行都前进 S_new（含 padding 列），而不是 num_new[b]",
    ),
    Mutant(
        "KVCache",
        "returns_copies",
        "makes the prefix contiguous for attention: a full copy of the cache at every step",
        [
            (
                "return self.keys[:, :, : self.length], self.values[:, :, : self.length]",
                "return self.keys[:, :, : self.length].contiguous(), self.values[:, :, : self.length].contiguous()",
            )
        ],
        mistake_zh="为注意力把前缀变成连续的：每一步都完整复制一遍缓存",
    ),
    Mutant(
        "KVCache",
        "returns_whole_buffer",
        "returns the whole max_len buffer instead of the valid prefix",
        [
            (
                "return self.keys[:, :, : self.length], self.values[:, :, : self.length]",
                "return self.keys, self.values",
            )
        ],
        mistake_zh="返回整个 max_len 缓冲区，而不是有效的前缀",
    ),
    Mutant(
        "KVCache",
        "bound_checked_while_writing",
        "checks max_len row by row inside the write loop: the rows before the full one are already written",
        [
            ("if bool((new_lengths > self.max_len).any()):", "if False:"),
            (
                "start, count = int(self.lengths[row]), int(num_new[row])",
                "start, count = int(self.lengths[row]), int(num_new[row])\n"
                "            if start + count > self.max_len:\n"
                '                raise ValueError(f"row {row} is full")',
            ),
        ],
        mistake_zh="在写入循环里逐行检查 max_len：满的那一行之前的行已经写进去了",
    ),
    Mutant(
        "KVCache",
        "bound_off_by_one",
        "refuses a write that fills a row exactly (>= max_len instead of > max_len)",
        [("(new_lengths > self.max_len).any()", "(new_lengths >= self.max_len).any()")],
        mistake_zh="拒绝恰好写满一行的写入（>= max_len 而不是 > max_len）",
    ),
    Mutant(
        "KVCache",
        "key_mask_inclusive",
        "marks column lengths[b] as written too (<= instead of <)",
        [("columns[None, :] < self.lengths[:, None]", "columns[None, :] <= self.lengths[:, None]")],
        mistake_zh="把第 lengths[b] 列也标记为已写入（<= 而不是 <）",
    ),
    Mutant(
        "attention",
        "calls_the_builtin",
        "F.scaled_dot_product_attention with the mask, then zeros for empty rows",
        [
            (
                'scores = scores.masked_fill(~allowed, float("-inf"))',
                "out = F.scaled_dot_product_attention(q.to(compute_dtype), k, v, attn_mask=allowed)\n"
                "    return torch.where(allowed.any(dim=-1, keepdim=True), out, 0.0).to(q.dtype)",
            )
        ],
        mistake_zh="带掩码调用 F.scaled_dot_product_attention，再把空行置零",
    ),
    Mutant(
        "repeat_kv",
        "calls_the_builtin",
        "torch.repeat_interleave, the reference",
        [("B, H_kv, S, D = x.shape", "return x.repeat_interleave(n_rep, dim=1)")],
        mistake_zh="调用 torch.repeat_interleave（即参考实现）",
    ),
]
